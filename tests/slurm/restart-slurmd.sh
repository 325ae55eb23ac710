#!/usr/bin/env bash
# Restart only the slurmd daemons of the cluster that tests/slurm/up.sh started
# (needed after plugstack.conf.d changes: slurmd caches the plugstack for the
# job prolog/epilog), then wait until every node is usable again.
#
#   tests/slurm/restart-slurmd.sh
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/slurm/lib.sh
. "$HERE/lib.sh"
need_root
[ -f "$CONF" ] || die "no $CONF: run up.sh first"
pid_alive slurmctld "slurmctld -D" || die "slurmctld not running: run up.sh"
export_slurm_env
T0=$(date +%s%N)

NODES=$(conf_nodes)
for n in $NODES; do
	stop_daemon "slurmd-$n" "slurmd -D" 10
done
# shellcheck disable=SC2034 # read by lib.sh (slurmd_fresh)
FRESH_SINCE=$(date +%s)
for n in $NODES; do
	mkdir -p "$STATE/spool/$n"
	start_daemon "slurmd-$n" "$RUN/slurmd-$n.out" slurmd -D -N "$n" -f "$CONF"
	FRESH_NODES="$FRESH_NODES $n"
	log "started slurmd $n (pid $(pid_of "slurmd-$n"))"
done
plugstack_hash >"$RUN/plugstack.hash"
wait_nodes_ready "$GOS_SLURM_WAIT" || die "nodes not ready after slurmd restart"
log "slurmd restarted: $NODES ($(( ($(date +%s%N) - T0) / 1000000 )) ms)"
