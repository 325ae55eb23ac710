#!/usr/bin/env bash
# The plugin at scale: one simulated Slurm cluster of many `slurmd -N gnI`
# on this host (tests/slurm, a state dir, ports, munged and ClusterName of its
# own), the plugin installed as tests/plugin installs it, and one job over
# every node, run twice: without --gym-otel and with it. Prints, from sdiag
# (reset before each phase), slurmctld's RPCs by message type per phase (start:
# submit to the first step's end; steady: the script's sleep; end: the
# script's end to the last epilog), the prolog and end times across nodes
# (the plugin's log lines in each slurmd log), whether every node's collector
# listened before that node's first task, and the collectors' memory (PSS).
#
#   tests/scale/run.sh [--nodes N] [--hold SECONDS] [--modes "off on"] [--keep]
#
# Root. Output: tables on stdout (also build/bench-scale/<N>/result.txt);
# progress on stderr. Tears its cluster down at the end unless --keep.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NODES=32
HOLD=95
MODES="off on"
KEEP=0
while [ $# -gt 0 ]; do
	case "$1" in
	--nodes) NODES=${2:?}; shift 2 ;;
	--hold) HOLD=${2:?}; shift 2 ;;
	--modes) MODES=${2:?}; shift 2 ;;
	--keep) KEEP=1; shift ;;
	*) echo "usage: $0 [--nodes N] [--hold SECONDS] [--modes 'off on'] [--keep]" >&2; exit 2 ;;
	esac
done

BASE=/var/lib/gym-otel-scale
export GOS_SLURM_STATE=$BASE/slurm
export GOS_SLURMCTLD_PORT=${GOS_SCALE_CTLD_PORT:-19817}
export GOS_SLURMD_PORT_BASE=${GOS_SCALE_SLURMD_PORT_BASE:-19900}
export GOS_MUNGE_SOCKET=/run/gym-otel-scale-munge/munge.socket.2
export GOS_SLURM_CLUSTER=gymscale
export GOS_SLURM_USER=gymscale
export GOS_SLURM_UID=2091
export GOS_SLURM_WAIT=${GOS_SLURM_WAIT:-300}
BACKEND_PORT=${GOS_SCALE_BACKEND_PORT:-19830}
BACKEND_HEALTH=$((BACKEND_PORT + 1))
TOKEN=scale-token-3e9a71
INSTALL=$BASE/install
RECORDS=/run/gym-otel-scale
OUT=${GOS_SCALE_OUT:-$REPO/build/bench-scale/$NODES}
COL=${GYM_OTEL_COLLECTOR:-$REPO/build/otelcol-gym}
# The plugin and CLI to install (default: this tree's build/).
PLUGIN_BUILD=${GOS_SCALE_BUILD:-$REPO/build}
export SLURM_CONF=$GOS_SLURM_STATE/slurm.conf

log() { printf '%s [scale] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root"
for f in gym_otel.so gym_otel_core.so gym-otel-spank; do
	[ -f "$PLUGIN_BUILD/$f" ] || die "$PLUGIN_BUILD/$f missing: make build"
done
case " $MODES " in *" on "*) [ -x "$COL" ] || die "$COL missing: make collector" ;; esac
T0=$(date +%s)
rm -rf "$OUT"
mkdir -p "$OUT"

BACKEND_PID=""
cleanup() {
	if [ -n "$BACKEND_PID" ]; then "$REPO/tests/backend/stop.sh" "$BACKEND_PID" >/dev/null 2>&1 || true; fi
	if [ $KEEP -eq 0 ]; then "$REPO/tests/slurm/down.sh" --purge >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# ------------------------------------------------ install as an admin would
mkdir -p "$INSTALL"
for f in gym_otel.so gym_otel_core.so gym-otel-spank; do
	install -m 0755 "$PLUGIN_BUILD/$f" "$INSTALL/$f"
done
cat >"$INSTALL/site.yaml" <<EOF
otel:
  endpoint: http://127.0.0.1:$BACKEND_PORT
  service_name: gym-scale
  token_env: OTEL_TOKEN
  binary: $COL
  gpu_metrics_port: null
  node_metrics_port: null
  health_check_timeout_seconds: 120
EOF
chmod 0644 "$INSTALL/site.yaml"
printf 'required %s/gym_otel.so site=%s/site.yaml cli=%s/gym-otel-spank record_dir=%s prolog_timeout=150\n' \
	"$INSTALL" "$INSTALL" "$INSTALL" "$RECORDS" >"$BASE/gym-otel.conf"

# ------------------------------------------------ backend and cluster
BE_DIR=$BASE/backend
rm -rf "$BE_DIR"
case " $MODES " in *" on "*)
	BACKEND_PID=$(BACKEND_PORT=$BACKEND_PORT BACKEND_TOKEN=$TOKEN BACKEND_DIR=$BE_DIR \
		BACKEND_HEALTH_PORT=$BACKEND_HEALTH OTELCOL=$COL "$REPO/tests/backend/run.sh")
	log "backend pid $BACKEND_PID on 127.0.0.1:$BACKEND_PORT" ;;
esac

log "bringing up $NODES slurmd"
TU=$(date +%s)
"$REPO/tests/slurm/up.sh" --clean --nodes "$NODES" --prolog-flags Alloc --no-plugstack \
	--plugstack "$BASE/gym-otel.conf" --extra-conf PrologEpilogTimeout=180 \
	--extra-conf MaxJobCount=1000 >"$OUT/env.sh"
UP_S=$(($(date +%s) - TU))
. "$GOS_SLURM_STATE/env.sh"
log "cluster up in ${UP_S}s"
SLURMD_RSS_KB=$(for f in "$GOS_SLURM_STATE"/run/slurmd-gn*.pid; do
	case "$f" in *.slurm.pid) continue ;; esac
	awk '/^Rss:/ {print $2}' "/proc/$(cat "$f")/smaps_rollup" 2>/dev/null || true
done | awk '{s+=$1} END {print s+0}')

# ------------------------------------------------ the job
JOB_DIR=$GOS_SLURM_JOBS/scale
mkdir -p "$JOB_DIR"
chmod 1777 "$JOB_DIR"
cat >"$JOB_DIR/job.sh" <<'EOF'
#!/bin/bash
# $1: marker dir. The first step: one task per node, each saying when it
# started and whether its node's collector listens on the task's endpoint.
d=$1
probe='
	ep=${OTEL_EXPORTER_OTLP_ENDPOINT:-}
	st=noenv
	if [ -n "$ep" ]; then
		hp=${ep#http://}; hp=${hp%%/*}
		if (exec 3<>"/dev/tcp/${hp%:*}/${hp##*:}") 2>/dev/null; then st=listening; else st=closed; fi
	fi
	echo "$SLURMD_NODENAME $(date +%s%3N) $st"'
# The batch script is the first task on the batch node.
bash -c "$probe" >"$d/batch.txt"
srun --ntasks-per-node=1 bash -c "$probe" >"$d/tasks.txt"
# Each phase ends when the runner has read sdiag (bounded: 60 s).
ack() { for ((i = 0; i < 600; i++)); do [ -e "$d/$1" ] && return; sleep 0.1; done; }
touch "$d/steady.start"
ack start.ack
sleep "$2"
touch "$d/steady.end"
ack end.ack
EOF
chmod 0755 "$JOB_DIR/job.sh"

# wait_file FILE SECONDS
wait_file() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do [ -e "$1" ] && return 0; sleep 0.1; done
	return 1
}

# rpc_table FILE: "type count" lines of sdiag's RPCs by message type.
rpc_table() {
	awk '/^Remote Procedure Call statistics by message type/ {on=1; next}
	     /^Remote Procedure Call statistics by user/ {on=0}
	     on && /count:/ {t=$1; sub(":$","",t); c=$0; sub(/.*count:/,"",c); sub(/ .*/,"",c); print t, c}' "$1"
}
rpc_users() {
	awk '/^Remote Procedure Call statistics by user/ {on=1; next}
	     /^Pending RPC/ {on=0}
	     on && /count:/ {t=$1; c=$0; sub(/.*count:/,"",c); sub(/ .*/,"",c); print t, c}' "$1"
}

# epilogs_done JOBID: how many nodes logged the end of job JOBID's epilog.
epilogs_done() {
	cat "$GOS_SLURM_STATE"/slurmd-gn*.log 2>/dev/null | grep -c "completed epilog for jobid $1\$" || true
}

run_mode() {
	local mode=$1 d="$JOB_DIR/$1" flag="" id
	rm -rf "$d"
	mkdir -p "$d"
	chmod 0777 "$d"
	[ "$mode" = on ] && flag="--gym-otel=job_dir=$d/out"
	sdiag -r >/dev/null
	id=$(su "$GOS_SLURM_USER" -c "cd $d && OTEL_TOKEN=$TOKEN sbatch --parsable -N $NODES -o $d/slurm.out $flag $JOB_DIR/job.sh $d $HOLD")
	log "mode $mode: job $id submitted"
	local ts
	ts=$(date +%s%3N)
	wait_file "$d/steady.start" 600 || die "job $id: the first step did not end"
	sdiag >"$OUT/sdiag-$mode-start.txt"
	sdiag -r >/dev/null
	touch "$d/start.ack"
	log "mode $mode: first step done after $(( $(date +%s%3N) - ts )) ms; steady for ${HOLD}s"
	if [ "$mode" = on ]; then
		# The collectors of this job: children of the supervisors the records name.
		sleep 5
		pss_collectors >"$OUT/mem-$mode.txt"
		pss_supervisors >"$OUT/mem-$mode-sup.txt"
	fi
	wait_file "$d/steady.end" $((HOLD + 120)) || die "job $id: the script did not reach its end"
	date +%s%3N >"$OUT/scriptend-$mode"
	sdiag >"$OUT/sdiag-$mode-steady.txt"
	sdiag -r >/dev/null
	touch "$d/end.ack"
	local i
	for ((i = 0; i < 3000; i++)); do
		[ "$(epilogs_done "$id")" -ge "$NODES" ] && break
		sleep 0.1
	done
	[ "$(epilogs_done "$id")" -ge "$NODES" ] || log "job $id: only $(epilogs_done "$id") of $NODES epilogs logged"
	sleep 2
	sdiag >"$OUT/sdiag-$mode-end.txt"
	echo "$id" >"$OUT/jobid-$mode"
}

# pss_supervisors: pid, PSS and RSS (KiB) of this cluster's supervisors.
pss_supervisors() {
	local p
	for p in $(pgrep -f "^$INSTALL/gym-otel-spank supervise" || true); do
		awk -v p="$p" '/^Rss:/ {r=$2} /^Pss:/ {s=$2} END {print p, s, r}' "/proc/$p/smaps_rollup" 2>/dev/null || true
	done
}

# pss_collectors: pid, PSS and RSS (KiB) of every collector of this cluster.
pss_collectors() {
	local p
	for p in $(pgrep -x otelcol-gym || true); do
		[ "$p" = "$BACKEND_PID" ] && continue
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "$JOB_DIR" || continue
		awk -v p="$p" '/^Rss:/ {r=$2} /^Pss:/ {s=$2} END {print p, s, r}' "/proc/$p/smaps_rollup" 2>/dev/null || true
	done
}

# ms NAME-OF-LOG-TIMESTAMP: epoch ms of an iso8601_ms log stamp ("" -> 0).
ms() { [ -n "$1" ] && date -d "$1" +%s%3N || echo 0; }
# first_ts FILE PATTERN: the timestamp of FILE's first line matching PATTERN.
first_ts() { grep -m1 -- "$2" "$1" | sed -n 's/^\[\([^]]*\)\].*/\1/p'; }
# node_times JOBID: per node "node prolog_start first_launch ready ready_ms stopped_ms epilog_start epilog_end" (ms, 0 or -1 when absent).
node_times() {
	local f n
	for f in "$GOS_SLURM_STATE"/slurmd-gn*.log; do
		n=${f##*/slurmd-}; n=${n%.log}
		printf '%s %s %s %s %s %s %s %s\n' "$n" \
			"$(ms "$(first_ts "$f" "Running spank/prolog for jobid \[$1\]")")" \
			"$(ms "$(first_ts "$f" "Finished wait for job $1's prolog")")" \
			"$(ms "$(first_ts "$f" "job $1: collector ready on")")" \
			"$(grep -m1 "job $1: collector ready on" "$f" | sed -n 's/.* \([0-9]*\) ms)$/\1/p' | grep . || echo -1)" \
			"$(grep -m1 "job $1: supervisor (pid [0-9]*) stopped in" "$f" | sed -n 's/.*stopped in \([0-9]*\) ms.*/\1/p' | grep . || echo -1)" \
			"$(ms "$(first_ts "$f" "Running spank/epilog for jobid \[$1\]")")" \
			"$(ms "$(first_ts "$f" "completed epilog for jobid $1\$")")"
	done
}
# dist: "n | min | p50 | p90 | max" of the numbers on stdin.
dist() {
	sort -n | awk '{a[NR]=$1} END {if (NR==0) {print "0 | | | | "; exit}; i=int(NR*0.9+0.5); if (i<1) i=1; printf "%d | %d | %d | %d | %d", NR, a[1], a[int((NR+1)/2)], a[i], a[NR]}'
}

for m in $MODES; do run_mode "$m"; done

# ------------------------------------------------ report
{
	echo "# bench-scale: $NODES slurmd on one host, one job over all nodes, steady ${HOLD}s"
	echo
	echo "cluster up: ${UP_S}s; slurmd RSS total $((SLURMD_RSS_KB / 1024)) MiB ($NODES daemons)"
	echo
	echo "## slurmctld RPCs by message type (sdiag, reset before each phase)"
	echo
	for phase in start steady end; do
		echo "### $phase"
		printf '| %-34s |' "message type"
		for m in $MODES; do printf ' %8s |' "$m"; done
		echo
		printf '|%s|' "------------------------------------"
		for m in $MODES; do printf '%s|' "----------"; done
		echo
		types=$(for m in $MODES; do rpc_table "$OUT/sdiag-$m-$phase.txt"; done | awk '{print $1}' | sort -u)
		for t in $types; do
			[ "$t" = REQUEST_STATS_INFO ] && continue
			printf '| %-34s |' "$t"
			for m in $MODES; do
				printf ' %8s |' "$(rpc_table "$OUT/sdiag-$m-$phase.txt" | awk -v t="$t" '$1==t {print $2}')"
			done
			echo
		done
		printf '| %-34s |' "total (without sdiag's own)"
		for m in $MODES; do
			printf ' %8s |' "$(rpc_table "$OUT/sdiag-$m-$phase.txt" | awk '$1!="REQUEST_STATS_INFO" {s+=$2} END {print s+0}')"
		done
		echo
		printf '| %-34s |' "by user (with sdiag's own)"
		for m in $MODES; do
			printf ' %8s |' "$(rpc_users "$OUT/sdiag-$m-$phase.txt" | tr '\n' ' ' | sed 's/ $//')"
		done
		echo
		echo
	done
	echo "## across the nodes (ms; slurmd's and the plugin's log lines)"
	echo
	echo "| figure | mode | n | min | p50 | p90 | max |"
	echo "|---|---|---|---|---|---|---|"
	for m in $MODES; do
		id=$(cat "$OUT/jobid-$m")
		node_times "$id" >"$OUT/nodes-$m.txt"
		# prolog: slurmd's "Running spank/prolog" to the first task's launch
		# (slurmd's "Finished wait for job's prolog").
		echo "| prolog start to first task launch | $m | $(awk '$2>0 && $3>0 {print $3-$2}' "$OUT/nodes-$m.txt" | dist) |"
		if [ "$m" = on ]; then
			echo "| collector ready (supervisor start to health, its report) | $m | $(awk '$5>=0 {print $5}' "$OUT/nodes-$m.txt" | dist) |"
			# each node's first task: the batch script on the batch node, the first step's task elsewhere
			cat "$JOB_DIR/$m/batch.txt" "$JOB_DIR/$m/tasks.txt" | sort -k1,1 -k2,2n | awk '!seen[$1]++ {print $1, $2}' >"$OUT/first-$m.txt"
			echo "| collector ready to the node's first task start (margin) | $m | $(awk 'NR==FNR {r[$1]=$4; next} r[$1]>0 {print $2-r[$1]}' "$OUT/nodes-$m.txt" "$OUT/first-$m.txt" | dist) |"
			echo "| epilog: supervisor stopped in | $m | $(awk '$6>=0 {print $6}' "$OUT/nodes-$m.txt" | dist) |"
		fi
		echo "| epilog start to end | $m | $(awk '$7>0 && $8>0 {print $8-$7}' "$OUT/nodes-$m.txt" | dist) |"
		echo "| script end to last epilog end | $m | $(awk -v e="$(cat "$OUT/scriptend-$m")" '$8>0 {print $8-e}' "$OUT/nodes-$m.txt" | dist) |"
	done
	echo
	if [ -f "$OUT/jobid-on" ]; then
		id=$(cat "$OUT/jobid-on")
		fw=$(grep -h "job $id: .*final-scrape wait" "$GOS_SLURM_STATE"/slurmd-gn*.log | sed -n 's/.* after \([0-9]*\) ms.*/\1/p' | head -1)
		echo "end hold (the batch step's final-scrape wait, --gym-otel job): ${fw:-?} ms"
		echo
		before=$(awk 'NR==FNR {r[$1]=$4; next} r[$1]>0 && r[$1]<=$2' "$OUT/nodes-on.txt" "$OUT/first-on.txt" | wc -l)
		listening=$(awk '$3=="listening"' "$JOB_DIR/on/tasks.txt" | wc -l)
		echo "collector ready (slurmd log) before the node's first task started (its own clock): $before of $NODES nodes"
		echo "the batch script found the batch node's collector listening: $(awk '{print $1 ": " $3}' "$JOB_DIR/on/batch.txt")"
		echo "the first step's task found its node's collector listening on its endpoint: $listening of $NODES nodes $(awk '$3!="listening" {printf "%s:%s ", $1, $3}' "$JOB_DIR/on/tasks.txt")"
		echo
		awk '{s+=$2; r+=$3; n++} END {printf "collectors: %d, PSS total %.0f MiB (%.1f MiB each), RSS total %.0f MiB (%.1f MiB each)\n", n, s/1024, (n?s/n/1024:0), r/1024, (n?r/n/1024:0)}' "$OUT/mem-on.txt"
		awk '{s+=$2; r+=$3; n++} END {printf "supervisors: %d, PSS total %.0f MiB (%.1f MiB each)\n", n, s/1024, (n?s/n/1024:0)}' "$OUT/mem-on-sup.txt"
	fi
	echo
	echo "bench-scale took $(($(date +%s) - T0)) s"
} | tee "$OUT/result.txt"
