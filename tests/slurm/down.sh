#!/usr/bin/env bash
# Stop everything tests/slurm/up.sh started (slurmd daemons, slurmctld, munged),
# by pid file, with bounded waits and a SIGKILL fallback. Idempotent.
#
#   tests/slurm/down.sh [--purge]     --purge also removes the state dir
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/slurm/lib.sh
. "$HERE/lib.sh"

PURGE=0
case "${1:-}" in
--purge) PURGE=1 ;;
"") ;;
*) die "usage: $0 [--purge]" ;;
esac
need_root

if [ -d "$RUN" ]; then
	# Cancel what is still queued/running while slurmctld and slurmd are up, so
	# that job epilogs run and job processes end the normal way.
	if pid_alive slurmctld "slurmctld -D" && [ -f "$CONF" ]; then
		export_slurm_env
		jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
		if [ -n "${jobs// /}" ]; then
			log "cancelling jobs: $jobs"
			# shellcheck disable=SC2086
			timeout 10 scancel $jobs 2>/dev/null || true
			for ((i = 0; i < 150; i++)); do
				[ -z "$(timeout 5 squeue -h -o %i 2>/dev/null || true)" ] && break
				sleep 0.1
			done
		fi
	fi
	# slurmd first, then slurmctld, then munged.
	for f in "$RUN"/slurmd-*.pid; do
		[ -e "$f" ] || continue
		case "$f" in *.slurm.pid) continue ;; esac
		stop_daemon "$(basename "$f" .pid)" "slurmd -D" 10
	done
	stop_daemon slurmctld "slurmctld -D" 15
	stop_daemon munged munged 10
	rm -f "$RUN"/*.slurm.pid "$RUN/plugstack.hash"
fi

# Left-overs of our cluster (a job still running when slurmd died): slurmstepd
# and job tasks carry SLURM_CONF=<our slurm.conf> in their environ.
self_and_parents=" $$ "
p=$$
while [ "$p" -gt 1 ]; do
	p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || echo 1)
	self_and_parents="$self_and_parents$p "
done
for d in /proc/[0-9]*; do
	p=${d#/proc/}
	case "$self_and_parents" in *" $p "*) continue ;; esac
	env_=$({ tr '\0' '\n' <"$d/environ"; } 2>/dev/null) || continue
	printf '%s\n' "$env_" | grep -qxF "SLURM_CONF=$CONF" || continue
	comm=$({ cat "$d/comm"; } 2>/dev/null || true)
	if [ "$comm" = slurmstepd ] || printf '%s\n' "$env_" | grep -q '^SLURM_JOB_ID='; then
		log "killing leftover $comm (pid $p)"
		kill -KILL "$p" 2>/dev/null || true
		REAP_PIDS="$REAP_PIDS $p"
	fi
done
wait_reaped

if [ $PURGE -eq 1 ] && [ -d "$STATE" ]; then
	log "removing $STATE"
	rm -rf "$STATE"
fi
log "down"
