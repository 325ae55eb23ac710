#!/usr/bin/env bash
# The main job, on this host: a real `sbatch --gym-otel` job on a local
# single-node Slurm with a local OTLP backend, then where its telemetry went.
#
#   make demo          (runs this after building everything)
#
# What it does, as root:
#   1. installs gym-otel-spank into a test prefix the way an admin would
#      (make install: plugin, core, CLI, plugstack.conf.d snippet, site file),
#   2. starts a local Slurm with that plugstack snippet (tests/slurm/up.sh),
#      an OTLP/HTTP backend (a second collector with bearer-token auth) and
#      Debian's node_exporter,
#   3. as the unprivileged user gymuser, stages a resolved NeMo Gym submit
#      config in a job dir and submits a script that starts a vLLM stand-in
#      and runs a Gym stand-in driver, with the token only in the
#      submitting shell's environment,
#   4. prints the job's end, the files per node with every scrape target's
#      samples, and what the backend got; fails, naming the target, when a
#      configured target has no sample in the files,
#   5. stops the backend, node_exporter and Slurm again.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
base=${GYM_OTEL_DEMO_DIR:-/var/lib/gym-otel-test}
prefix=$base/install
demo=$base/demo
user=${GOS_SLURM_USER:-gymuser}
backend_port=${GYM_OTEL_DEMO_BACKEND_PORT:-24318}
backend_health=${GYM_OTEL_DEMO_BACKEND_HEALTH:-24133}
node_port=${GYM_OTEL_DEMO_NODE_PORT:-29100}
vllm_port=${GYM_OTEL_DEMO_VLLM_PORT:-28000}

say() { printf '\n== %s\n' "$*"; }
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	"$repo/tests/slurm/down.sh" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "installing gym-otel-spank into $prefix (make install)"
rm -rf "$prefix" "$demo"
make -s -C "$repo" install PREFIX="$prefix" SYSCONFDIR="$prefix/etc" SLURM_PLUGIN_DIR="$prefix/lib/slurm" >/dev/null
install -m 0755 "$repo/build/otelcol-gym" "$prefix/bin/otelcol-gym"
install -m 0755 "$repo"/build/standins/* "$prefix/bin/"
chmod 0755 "$base" "$prefix" "$prefix"/*

say "starting the OTLP backend on 127.0.0.1:$backend_port (bearer-token auth)"
token="demo-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
mkdir -p "$demo/backend"
export BACKEND_PORT=$backend_port BACKEND_HEALTH_PORT=$backend_health BACKEND_DIR=$demo/backend
export BACKEND_TOKEN=$token OTELCOL=$prefix/bin/otelcol-gym
pids+=("$("$repo/tests/backend/run.sh")")
unset BACKEND_TOKEN

say "starting Debian's node_exporter on 127.0.0.1:$node_port"
/usr/bin/prometheus-node-exporter --web.listen-address="127.0.0.1:$node_port" >"$demo/node_exporter.log" 2>&1 &
pids+=("$!")

cat >"$prefix/etc/slurm/gym-otel.yaml" <<EOF
# Site file: the values every job gets unless it says otherwise.
otel:
  endpoint: http://127.0.0.1:$backend_port
  service_name: gym-demo
  token_env: OTEL_TOKEN
  binary: $prefix/bin/otelcol-gym
  gpu_metrics_port: null          # no dcgm-exporter on this machine
  node_metrics_port: $node_port
  scrape_interval_seconds: 5
EOF
chmod 0644 "$prefix/etc/slurm/gym-otel.yaml"

say "starting a local Slurm with the plugin in plugstack.conf.d"
eval "$("$repo/tests/slurm/up.sh" --nodes 1 --prolog-flags Alloc --no-plugstack --plugstack "$prefix/etc/slurm/plugstack.conf.d/gym-otel.conf")"

jobdir=$GOS_SLURM_JOBS/demo-$(date +%Y%m%d-%H%M%S)
install -d -o "$user" -g "$user" -m 0755 "$jobdir"
cat >"$jobdir/submit.yaml" <<EOF
# A resolved NeMo Gym submit config, as gym eval submit stages it.
compute:
  local: {}
driver:
  gym_install: /opt/gym
job:
  output_path: $jobdir
services:
  policy:
    type: vllm
    port: $vllm_port
    served_model_name: demo-model
EOF
cat >"$jobdir/job.sh" <<EOF
#!/bin/bash
#SBATCH --job-name=gym-otel-demo
#SBATCH --output=$jobdir/slurm-%j.out
#SBATCH $("$prefix/bin/gym-otel-spank" directive --config "$jobdir/submit.yaml" --run-id demo-run --benchmark demo-bench | sed 's/^#SBATCH //')
echo "collector env: OTEL_EXPORTER_OTLP_ENDPOINT=\$OTEL_EXPORTER_OTLP_ENDPOINT"
$prefix/bin/vllm-standin --port $vllm_port --model demo-model &
vllm=\$!
$prefix/bin/gym-standin --server agent --rollouts 5 --sandbox-provider local
rc=\$?
echo "driver exited with \$rc"
exit \$rc
EOF
chown "$user:$user" "$jobdir/submit.yaml" "$jobdir/job.sh"

say "submitting as $user: sbatch $jobdir/job.sh (token only in the submitting shell)"
export OTEL_TOKEN=$token
jobid=$(cd "$jobdir" && setpriv --reuid="$user" --regid="$user" --init-groups \
	env HOME="/home/$user" USER="$user" LOGNAME="$user" sbatch --parsable job.sh)
unset OTEL_TOKEN
echo "job $jobid submitted"
for _ in $(seq 1 120); do
	state=$(squeue -h -j "$jobid" -o %T 2>/dev/null || true)
	[ -z "$state" ] && break
	sleep 0.5
done
scontrol show job "$jobid" 2>/dev/null | grep -Eo 'JobState=[A-Z]+|ExitCode=[0-9:]+' | tr '\n' ' '
echo
sinfo -h -o 'nodes: %N %T'

say "job output ($jobdir/slurm-$jobid.out)"
cat "$jobdir/slurm-$jobid.out" 2>/dev/null || true

say "where the telemetry went"
echo "job dir:     $jobdir/otel/  (collector.yaml, collector.log, state.json, {metrics,traces,logs}.jsonl)"
# --require-targets: a configured scrape target with no answered scrape in
# its node's files is named, and fails the demo below.
targets_ok=1
"$prefix/bin/gym-otel-spank" inspect --require-targets "$jobdir" || targets_ok=0
# The backend writes as it receives; its files are complete once it stops.
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
"$repo/tests/backend/stop.sh" "${pids[0]}" >/dev/null 2>&1 || sleep 1
pids=()
echo "backend:     $demo/backend/  (what the OTLP/HTTP endpoint received with the token)"
"$prefix/bin/gym-otel-spank" inspect "$demo/backend"
if grep -rqF "$token" "$jobdir" 2>/dev/null; then
	echo "ERROR: the token is in the job dir" >&2
	exit 1
fi
echo
echo "the token is nowhere in $jobdir"
if [ "$targets_ok" != 1 ]; then
	echo "ERROR: a configured scrape target has no sample in the job's files (named above)" >&2
	exit 1
fi
