# shellcheck shell=bash
# Shared helpers for tests/slurm/*.sh. Sourced, never executed.
#
# Everything lives under one state directory (GOS_SLURM_STATE); see README.md.

GOS_SLURM_STATE="${GOS_SLURM_STATE:-/var/lib/gym-otel-test/slurm}"
GOS_SLURM_USER="${GOS_SLURM_USER:-gymuser}"
GOS_SLURM_UID="${GOS_SLURM_UID:-2001}"
GOS_SLURM_GROUP2="${GOS_SLURM_GROUP2:-gymgrp}"
GOS_SLURMCTLD_PORT="${GOS_SLURMCTLD_PORT:-16817}"
GOS_SLURM_CLUSTER="${GOS_SLURM_CLUSTER:-gymtest}"
GOS_SLURMD_PORT_BASE="${GOS_SLURMD_PORT_BASE:-16820}"
GOS_SLURM_WAIT="${GOS_SLURM_WAIT:-30}"
# munged's socket. The default is the system one (shared with any other
# cluster on this host); another path gives this cluster its own munged
# (socket dir, pid, seed and log files beside the socket) and AuthInfo=socket=.
GOS_MUNGE_SOCKET="${GOS_MUNGE_SOCKET:-/run/munge/munge.socket.2}"

STATE="$GOS_SLURM_STATE"
CONF="$STATE/slurm.conf"
RUN="$STATE/run"

log() { printf '%s [gos-slurm] %s\n' "$(date +%H:%M:%S.%3N)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need_root() {
	[ "$(id -u)" -eq 0 ] || die "must run as root"
}

# Node names of the running configuration ("gn1 gn2 ..."), from slurm.conf.
conf_nodes() {
	[ -f "$CONF" ] || return 0
	sed -n 's/^NodeName=\([^ ]*\) .*/\1/p' "$CONF" | tr '\n' ' ' | sed 's/ $//'
}

# pid_alive NAME PATTERN: true when run/NAME.pid holds a live pid whose
# command line contains PATTERN (guards against recycled pids).
pid_alive() {
	local f="$RUN/$1.pid" pid
	[ -s "$f" ] || return 1
	pid=$(cat "$f")
	[ -r "/proc/$pid/cmdline" ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$2"
}

pid_of() { cat "$RUN/$1.pid" 2>/dev/null || true; }

# proc_state PID: one-letter state, or "gone".
proc_state() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo gone; }

# wait_gone PID TENTHS [ZOMBIE_OK]: wait until PID exited (a zombie counts as
# exited when ZOMBIE_OK=1). Returns 1 on timeout.
wait_gone() {
	local pid=$1 n=$2 zok=${3:-0} i st
	for ((i = 0; i < n; i++)); do
		st=$(proc_state "$pid")
		[ "$st" = gone ] && return 0
		[ "$zok" = 1 ] && [ "$st" = Z ] && return 0
		sleep 0.1
	done
	return 1
}

# Our daemons are reparented to PID 1, which may reap them only after a
# second or two (seen under a firecracker init): stop_daemon collects the pids
# and wait_reaped waits (bounded) for the zombies to go too, so that a pgrep
# right after down.sh finds nothing.
REAP_PIDS=""
wait_reaped() {
	local pid
	for pid in $REAP_PIDS; do
		wait_gone "$pid" 50 0 || log "pid $pid exited but is not reaped yet"
	done
	REAP_PIDS=""
}

# stop_daemon NAME PATTERN [TIMEOUT_S]: SIGTERM, bounded wait, SIGKILL.
stop_daemon() {
	local name=$1 pat=$2 t=${3:-10} pid
	if ! pid_alive "$name" "$pat"; then
		rm -f "$RUN/$name.pid"
		return 0
	fi
	pid=$(pid_of "$name")
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" $((t * 10)) 1; then
		log "$name (pid $pid) still alive after ${t}s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 50 1 || true
	fi
	REAP_PIDS="$REAP_PIDS $pid"
	rm -f "$RUN/$name.pid"
}

# start_daemon NAME OUTFILE CMD...: start CMD in its own session, detached
# from the caller (survives the calling shell), stdio to OUTFILE, cwd /, and a
# clean environment like a service manager gives (PATH, plus SLURM_CONF as an
# admin with a non-default slurm.conf would set it): the daemons' environ is
# what slurmstepd and the job prolog/epilog inherit.
DAEMON_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
start_daemon() {
	local name=$1 out=$2
	shift 2
	mkdir -p "$RUN"
	# No job control in scripts: the background child is not a process group
	# leader, so setsid execs in place and $! is the daemon's pid.
	# Nothing but stdio is inherited, as from a service manager: a daemon
	# must not keep a descriptor of the caller's (a lock, a pipe) open.
	(
		cd /
		for fd in /proc/self/fd/*; do
			fd=${fd##*/}
			[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
		done
		exec env -i PATH="$DAEMON_PATH" SLURM_CONF="$CONF" setsid "$@"
	) </dev/null >"$out" 2>&1 &
	echo $! >"$RUN/$name.pid"
	disown 2>/dev/null || true
}

# Hash of the plugstack configuration that slurmd has to be restarted for.
plugstack_hash() {
	{
		cat "$STATE/plugstack.conf" 2>/dev/null
		for f in "$STATE"/plugstack.conf.d/*.conf; do
			[ -e "$f" ] || continue
			echo "== $f"
			cat "$f"
		done
	} | sha256sum | cut -d' ' -f1
}

export_slurm_env() {
	export SLURM_CONF="$CONF"
}

# FRESH_NODES / FRESH_SINCE (epoch s): slurmd daemons (re)started by this
# script; a node only counts as ready once its new slurmd registered.
FRESH_NODES=""
FRESH_SINCE=0
NODE_STARTS=""
slurmd_fresh() {
	local n=$1 t
	case " $FRESH_NODES " in *" $n "*) ;; *) return 0 ;; esac
	grep -q 'slurmd started on' "$RUN/slurmd-$n.out" 2>/dev/null || return 1
	t=$(printf '%s\n' "$NODE_STARTS" | awk -v n="$n" '$1==n {print $2; exit}')
	[ -n "$t" ] || return 1
	t=$(date -d "$t" +%s 2>/dev/null) || return 1
	[ "$t" -ge "$FRESH_SINCE" ]
}

# Nodes (from slurm.conf) whose state is not a usable, responding one.
# Usable: idle, mixed, allocated (no '*', no drain/down/fail flags).
nodes_not_ready() {
	local want have
	want=$(conf_nodes)
	have=$(SLURM_CONF="$CONF" timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null) || {
		echo "$want"
		return 0
	}
	local n st bad=""
	# One RPC for every node's SlurmdStartTime (slurmd_fresh reads it).
	NODE_STARTS=""
	if [ -n "$FRESH_NODES" ]; then
		NODE_STARTS=$(SLURM_CONF="$CONF" timeout 10 scontrol -o show node 2>/dev/null |
			sed -n 's/^NodeName=\([^ ]*\) .*SlurmdStartTime=\([^ ]*\).*/\1 \2/p') || true
	fi
	for n in $want; do
		st=$(printf '%s\n' "$have" | awk -v n="$n" '$1==n {print $2; exit}')
		case "$st" in
		idle | mixed | allocated)
			if ! slurmd_fresh "$n"; then bad="$bad $n:not-registered-since-restart"; fi
			;;
		*) bad="$bad $n:${st:-missing}" ;;
		esac
	done
	echo "${bad# }"
}

# Resume nodes left drained/down by an earlier test (slurmd must be running).
resume_bad_nodes() {
	local n st reason
	while read -r n st; do
		case "$st" in
		drain* | down* | fail*)
			reason=$(SLURM_CONF="$CONF" scontrol show node "$n" 2>/dev/null | sed -n 's/^ *Reason=//p')
			log "node $n is $st (Reason=${reason:-none}); resuming"
			SLURM_CONF="$CONF" scontrol update nodename="$n" state=resume >/dev/null 2>&1 ||
				SLURM_CONF="$CONF" scontrol update nodename="$n" state=idle >/dev/null 2>&1 || true
			;;
		esac
	done < <(SLURM_CONF="$CONF" timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null || true)
}

dump_logs() {
	local f
	for f in "$STATE"/slurmctld.log "$STATE"/slurmd-*.log "$RUN"/*.out; do
		[ -f "$f" ] || continue
		echo "==== tail $f" >&2
		tail -n 25 "$f" >&2
	done
	SLURM_CONF="$CONF" timeout 5 sinfo -N -l >&2 2>&1 || true
}

# wait_nodes_ready [TIMEOUT_S]: bounded wait until every node is usable.
wait_nodes_ready() {
	local t=${1:-$GOS_SLURM_WAIT} start bad resumed=0
	start=$(date +%s)
	while :; do
		bad=$(nodes_not_ready)
		[ -z "$bad" ] && return 0
		if [ $(($(date +%s) - resumed)) -ge 3 ] && printf '%s' "$bad" | grep -Eq ':(drain|drained|down|fail)'; then
			resume_bad_nodes
			resumed=$(date +%s)
		fi
		if [ $(($(date +%s) - start)) -ge "$t" ]; then
			log "nodes not ready after ${t}s: $bad"
			dump_logs
			return 1
		fi
		sleep 0.2
	done
}
