#!/usr/bin/env bash
# The main job on the two-node docker cluster (Slurm 22.05, Debian bookworm):
# bring it up, submit as the unprivileged gymuser a job that starts a vLLM
# stand-in on each node and runs a Gym stand-in driver, print where its
# telemetry went with a summary per node and at the backend, tear it down.
#
#   make demo-cluster          (or: tests/slurm-docker/demo.sh [bookworm|trixie|sid])
#
# GYM_OTEL_KEEP=1 leaves the cluster up (tests/slurm-docker/down.sh to stop).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
suite=${1:-bookworm}
. "$here/lib.sh" "$suite"

say() { printf '\n== %s\n' "$*"; }
cleanup() { [ "${GYM_OTEL_KEEP:-0}" = 1 ] || "$here/down.sh" "$suite"; }
trap cleanup EXIT

say "bringing the cluster up: ctl (login node), c1, c2 (compute), backend (OTLP/HTTP with a bearer token)"
"$here/up.sh" "$suite" alloc >/dev/null
cli=$work/stage/usr/bin/gym-otel-spank

tag=demo-$(date +%H%M%S)
jobs=$work/jobs/$tag
dir=/jobs/$tag
install -d -o 2000 -g 2000 "$jobs"
cat >"$jobs/submit.yaml" <<YAML
# A resolved NeMo Gym submit config, as gym eval submit stages it.
compute:
  dockerlab: {}
driver:
  gym_install: /opt/gym
job:
  output_path: $dir
services:
  policy:
    type: vllm
    port: 8000
    served_model_name: tiny-model
otel:
  gym_span_groups: default,verify,sandbox
YAML
cat >"$jobs/job.sh" <<JOB
#!/bin/bash
# A vLLM stand-in on each node, then the driver on the first node.
srun -N2 --ntasks-per-node=1 --overlap bash -c 'exec /opt/gym-standins/vllm-standin --port 8000 --model tiny-model --scrape-log $dir/scrapes.\$SLURMD_NODENAME' &
for i in \$(seq 1 300); do [ -s $dir/scrapes.c1 ] && [ -s $dir/scrapes.c2 ] && break; sleep 0.1; done
echo "driver env: OTEL_EXPORTER_OTLP_ENDPOINT=\$OTEL_EXPORTER_OTLP_ENDPOINT NEMO_GYM_OTEL_RUN_ID=\$NEMO_GYM_OTEL_RUN_ID"
/opt/gym-standins/gym-standin --server agent --rollouts 5 --rollout-duration 200ms --sandbox-provider docker
rc=\$?
echo "driver exited with \$rc"
exit \$rc
JOB
chown 2000:2000 "$jobs/submit.yaml" "$jobs/job.sh"
chmod 0755 "$jobs/job.sh"

say "submitting as gymuser on ctl: sbatch -N2 --gym-otel=config=$dir/submit.yaml,benchmark=demo job.sh"
OTEL_TOKEN=$(sed -n 's/^BACKEND_TOKEN=//p' "$work/secret/backend.env")
export OTEL_TOKEN
id=$(docker exec -u gymuser -w "$dir" -e OTEL_TOKEN "$project-ctl" \
	sbatch --parsable -N2 --gym-otel="config=$dir/submit.yaml,benchmark=demo" -o "$dir/slurm-%j.out" job.sh)
unset OTEL_TOKEN
echo "job $id"
for _ in $(seq 1 600); do
	st=$(dx "$project-ctl" scontrol -o show job "$id" | grep -o 'JobState=[A-Z_]*' || true)
	case "$st" in JobState=PENDING | JobState=CONFIGURING | JobState=RUNNING | JobState=COMPLETING | '') sleep 0.25 ;; *) break ;; esac
done
wait_idle 60 || true
dx "$project-ctl" scontrol -o show job "$id" | grep -Eo 'JobState=[A-Z_]+|ExitCode=[0-9:]+|NodeList=[^ ]+' | tr '\n' ' '
echo
dx "$project-ctl" sinfo -h -N -o 'node %N: %T'

say "job output"
cat "$jobs/slurm-$id.out"

say "where the telemetry went"
echo "job dir (shared by all nodes): $jobs"
echo "  otel/          c1, the job's first node: collector.yaml, collector.log, state.json, {metrics,traces,logs}.jsonl"
echo "  otel/nodes/c2/ the other node, the same files"
"$cli" inspect "$jobs"
# The backend writes as it receives; stop it so its files are complete.
dx "$project-backend" pkill -TERM -x otelcol-gym || true
for _ in $(seq 1 50); do dx "$project-backend" pgrep -x otelcol-gym >/dev/null || break; sleep 0.1; done
echo
echo "backend (OTLP/HTTP at http://$net.20:4318, bearer token required): $work/backend"
"$cli" inspect "$work/backend"
if grep -rqF "$(sed -n 's/^BACKEND_TOKEN=//p' "$work/secret/backend.env")" "$jobs" "$work/log"; then
	echo "ERROR: the token is in the job dir or the Slurm logs" >&2
	exit 1
fi
echo
echo "the token is nowhere in the job dir or the Slurm logs"
