#!/usr/bin/env bash
# Bring up (idempotently) a real local Slurm cluster on this host:
# munged, slurmctld and N slurmd daemons ("slurmd -D -N gnI", one port each).
#
#   tests/slurm/up.sh [--nodes N] [--prolog-flags FLAGS] [--plugstack FILE]...
#                     [--no-plugstack] [--extra-conf 'Key=Value']... [--cgroup] [--gpus N] [--clean]
#
# stdout: only `export VAR=...` lines (eval-able); progress goes to stderr.
# See tests/slurm/README.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/slurm/lib.sh
. "$HERE/lib.sh"
# shellcheck source=tests/slurm/slurm_conf.sh
. "$HERE/slurm_conf.sh"

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

NODES=2
PROLOG_FLAGS=""
PLUGSTACK_FILES=()
NO_PLUGSTACK=0
EXTRA_CONF=()
CLEAN=0
CGROUP=0
GPUS=0
while [ $# -gt 0 ]; do
	case "$1" in
	--nodes) NODES=${2:?}; shift 2 ;;
	--nodes=*) NODES=${1#*=}; shift ;;
	--prolog-flags) PROLOG_FLAGS=${2?}; shift 2 ;;
	--prolog-flags=*) PROLOG_FLAGS=${1#*=}; shift ;;
	--plugstack) PLUGSTACK_FILES+=("${2:?}"); shift 2 ;;
	--plugstack=*) PLUGSTACK_FILES+=("${1#*=}"); shift ;;
	--no-plugstack) NO_PLUGSTACK=1; shift ;;
	--extra-conf) EXTRA_CONF+=("${2:?}"); shift 2 ;;
	--extra-conf=*) EXTRA_CONF+=("${1#*=}"); shift ;;
	--clean) CLEAN=1; shift ;;
	--cgroup) CGROUP=1; shift ;;
	--gpus) GPUS=${2:?}; shift 2 ;;
	--gpus=*) GPUS=${1#*=}; shift ;;
	-h | --help) usage ;;
	*) log "unknown argument: $1"; usage ;;
	esac
done
case "$NODES" in '' | *[!0-9]*) die "--nodes wants a number" ;; esac
{ [ "$NODES" -ge 1 ] && [ "$NODES" -le 1024 ]; } || die "--nodes must be 1..1024"
case "$GPUS" in '' | *[!0-9]*) die "--gpus wants a number" ;; esac
[ "$GPUS" -le 8 ] || die "--gpus must be 0..8"
need_root
T0=$(date +%s%N)

for b in munged munge unmunge slurmctld slurmd sinfo scontrol setsid; do
	command -v "$b" >/dev/null || die "$b not found: run .ci/install-deps.sh"
done

if [ $CLEAN -eq 1 ]; then
	log "--clean: stopping everything and wiping $STATE"
	"$HERE/down.sh" >&2
	rm -rf "$STATE"
fi

# ---------------------------------------------------------------- test user
if ! getent group "$GOS_SLURM_GROUP2" >/dev/null; then
	groupadd "$GOS_SLURM_GROUP2"
fi
if ! getent passwd "$GOS_SLURM_USER" >/dev/null; then
	if ! getent group "$GOS_SLURM_USER" >/dev/null; then
		if getent group "$GOS_SLURM_UID" >/dev/null; then
			groupadd "$GOS_SLURM_USER"
		else
			groupadd -g "$GOS_SLURM_UID" "$GOS_SLURM_USER"
		fi
	fi
	useradd -u "$GOS_SLURM_UID" -g "$GOS_SLURM_USER" -G "$GOS_SLURM_GROUP2" \
		-m -d "/home/$GOS_SLURM_USER" -s /bin/bash "$GOS_SLURM_USER"
	log "created user $GOS_SLURM_USER ($(id "$GOS_SLURM_USER"))"
elif ! id -nG "$GOS_SLURM_USER" | tr ' ' '\n' | grep -qx "$GOS_SLURM_GROUP2"; then
	usermod -aG "$GOS_SLURM_GROUP2" "$GOS_SLURM_USER"
fi

# ---------------------------------------------------------------- state dir
mkdir -p "$STATE" "$RUN" "$STATE/ctld" "$STATE/plugstack.conf.d" "$STATE/jobs"
chmod 0755 "$STATE" "$STATE/plugstack.conf.d"
chmod 0700 "$STATE/ctld" "$RUN"
chmod 1777 "$STATE/jobs"
# State dir may sit under a parent that root created with a tight umask.
p=$(dirname "$STATE")
while [ "$p" != / ]; do
	if [ -d "$p" ] && [ -z "$(find "$p" -maxdepth 0 -perm -o+x)" ]; then
		log "chmod o+x $p (the test user must reach $STATE)"
		chmod o+x "$p"
	fi
	p=$(dirname "$p")
done

printf 'include %s/plugstack.conf.d/*.conf\n' "$STATE" >"$STATE/plugstack.conf.new"
mv -f "$STATE/plugstack.conf.new" "$STATE/plugstack.conf"
chmod 0644 "$STATE/plugstack.conf"
if [ $NO_PLUGSTACK -eq 1 ]; then
	rm -f "$STATE"/plugstack.conf.d/*.conf
fi
for f in "${PLUGSTACK_FILES[@]+"${PLUGSTACK_FILES[@]}"}"; do
	[ -f "$f" ] || die "--plugstack $f: no such file"
	b=$(basename "$f")
	case "$b" in *.conf) ;; *) b="$b.conf" ;; esac
	install -m 0644 "$f" "$STATE/plugstack.conf.d/$b"
	log "plugstack snippet installed: $STATE/plugstack.conf.d/$b"
done

# ---------------------------------------------------------------- munge
MUNGE_KEY=/etc/munge/munge.key
if [ ! -s "$MUNGE_KEY" ]; then
	log "creating munge key $MUNGE_KEY"
	mkdir -p /etc/munge
	if command -v mungekey >/dev/null; then
		mungekey --create --keyfile="$MUNGE_KEY" --force
	else
		dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
	fi
fi
MUNGE_USER=root
getent passwd munge >/dev/null && MUNGE_USER=munge
chown "$MUNGE_USER:" "$MUNGE_KEY" /etc/munge
chmod 0400 "$MUNGE_KEY"
chmod 0700 /etc/munge
MUNGE_DIR=$(dirname "$GOS_MUNGE_SOCKET")
MUNGED_ARGS=()
AUTH_INFO=""
if [ "$GOS_MUNGE_SOCKET" != /run/munge/munge.socket.2 ]; then
	# This cluster's own munged: everything beside its socket.
	MUNGED_ARGS=(--socket="$GOS_MUNGE_SOCKET" --pid-file="$MUNGE_DIR/munged.pid"
		--seed-file="$MUNGE_DIR/munged.seed" --log-file="$MUNGE_DIR/munged.log")
	AUTH_INFO="AuthInfo=socket=$GOS_MUNGE_SOCKET"
fi
for d in "$MUNGE_DIR" /var/lib/munge /var/log/munge; do
	mkdir -p "$d"
	chown "$MUNGE_USER:" "$d"
done
chmod 0711 "$MUNGE_DIR"   # clients (any uid) must reach the socket
chmod 0700 /var/lib/munge /var/log/munge

munge_ok() { munge -S "$GOS_MUNGE_SOCKET" -n 2>/dev/null | unmunge -S "$GOS_MUNGE_SOCKET" >/dev/null 2>&1; }
if pid_alive munged munged; then
	:
elif munge_ok; then
	log "a munged not started by us already serves $GOS_MUNGE_SOCKET; using it"
else
	# munged forks itself; -F keeps it in the foreground so that we own the pid.
	rm -f "$GOS_MUNGE_SOCKET" "$GOS_MUNGE_SOCKET.lock" "$MUNGE_DIR/munged.pid"
	if [ "$MUNGE_USER" = root ]; then
		start_daemon munged "$RUN/munged.out" munged -F --force "${MUNGED_ARGS[@]+"${MUNGED_ARGS[@]}"}"
	else
		start_daemon munged "$RUN/munged.out" setpriv --reuid="$MUNGE_USER" \
			--regid="$MUNGE_USER" --init-groups munged -F "${MUNGED_ARGS[@]+"${MUNGED_ARGS[@]}"}"
	fi
	log "started munged (pid $(pid_of munged)) on $GOS_MUNGE_SOCKET"
fi
for ((i = 0; i < 100; i++)); do munge_ok && break; sleep 0.1; done
munge_ok || { cat "$RUN/munged.out" >&2 2>/dev/null || true; tail -n 20 /var/log/munge/munged.log >&2 2>/dev/null || true; die "munged does not answer"; }

# ---------------------------------------------------------------- slurm.conf
HOST=$(hostname -s)
{
	conf_header="# Generated by tests/slurm/up.sh; do not edit (rewritten on every up.sh)." \
		conf_cluster=$GOS_SLURM_CLUSTER conf_ctld_host="$HOST(127.0.0.1)" conf_ctld_port=$GOS_SLURMCTLD_PORT \
		conf_auth_note= conf_auth_info=${AUTH_INFO#AuthInfo=} \
		conf_state=$STATE/ctld conf_spool="$STATE/spool/%n" \
		conf_ctld_pid=$RUN/slurmctld.slurm.pid conf_slurmd_pid="$RUN/slurmd-%n.slurm.pid" \
		conf_ctld_log=$STATE/slurmctld.log conf_slurmd_log="$STATE/slurmd-%n.log" \
		conf_plugstack=$STATE/plugstack.conf conf_switch=switch/none \
		conf_slurmd_params=config_overrides conf_slurmd_timeout=30 conf_min_job_age=30 conf_tmpfs=/tmp \
		conf_prolog_flags=$PROLOG_FLAGS slurm_conf
	GRES=""
	if [ "$GPUS" -gt 0 ]; then
		echo "GresTypes=gpu"
		GRES=" Gres=gpu:$GPUS"
	fi
	for ((i = 1; i <= NODES; i++)); do
		echo "NodeName=gn$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((GOS_SLURMD_PORT_BASE + i - 1)) CPUs=8 RealMemory=4000$GRES State=UNKNOWN"
	done
	NODELIST="gn[1-$NODES]"
	[ "$NODES" -eq 1 ] && NODELIST=gn1
	echo "PartitionName=debug Nodes=$NODELIST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
	# sruns listen in a range of their own, as a site that filters its
	# network sets it, above the kernel's ephemeral ports where the jobs'
	# collector ports are chosen too: the prolog passes over it
	# (tests/plugin: TestPortFilterOtherUsers).
	echo "SrunPortRange=61000-62999"
	if [ $CGROUP -eq 1 ]; then
		# Slurm's own cgroup containment (cgroup v1 here): tasks in
		# <ctrl>/slurm_<node>/uid_<uid>/job_<id>/step_<n>, bounded by --mem.
		echo "ProctrackType=proctrack/cgroup"
		echo "TaskPlugin=task/cgroup"
		echo "JobAcctGatherType=jobacct_gather/cgroup"
		echo "SelectTypeParameters=CR_CPU_Memory"
	fi
	for l in "${EXTRA_CONF[@]+"${EXTRA_CONF[@]}"}"; do
		echo "$l"
	done
} >"$CONF.new"
CGROUP_CHANGED=0
if [ $CGROUP -eq 1 ]; then
	printf '%s\n' '# Generated by tests/slurm/up.sh --cgroup.' 'CgroupPlugin=cgroup/v1' \
		'ConstrainRAMSpace=yes' 'ConstrainSwapSpace=yes' 'ConstrainCores=yes' >"$STATE/cgroup.conf.new"
	if ! cmp -s "$STATE/cgroup.conf.new" "$STATE/cgroup.conf"; then
		mv -f "$STATE/cgroup.conf.new" "$STATE/cgroup.conf"
		CGROUP_CHANGED=1
	else
		rm -f "$STATE/cgroup.conf.new"
	fi
	chmod 0644 "$STATE/cgroup.conf"
else
	rm -f "$STATE/cgroup.conf"
fi
# --gpus N: each node has N GPUs, character devices of NVIDIA's major
# (195) under <state>/dev (not /dev: no real /dev/nvidia* is named): gn2's
# are minors N..2N-1, every other node's minors 0..N-1, one NodeName= line
# of gres.conf each, so that a node's GRES indexes (0..N-1 on every node:
# a GPU's place in the node's GRES list) differ from its devices' minors
# on gn2. The nodes share this host and its files. Slurm 22.05's slurmd
# stat()s each File= (its major:minor, for a devices cgroup): a missing one
# is fatal ("can't stat gres.conf file"), one that is not a character or
# block device an error ("is not a valid character or block device, fix
# your gres.conf", slurmd -G). Nothing opens them, and
# the cgroup.conf of --cgroup does not set ConstrainDevices. Slurm gives a
# job GPUs only where it asks for them (--gres=gpu, --gpus...): other jobs
# get no SLURM_JOB_GPUS nor CUDA_VISIBLE_DEVICES.
GRES_CHANGED=0
if [ "$GPUS" -gt 0 ]; then
	mkdir -p "$STATE/dev"
	chmod 0755 "$STATE/dev"
	MINORS=$GPUS
	[ "$NODES" -lt 2 ] || MINORS=$((2 * GPUS))
	for ((m = 0; m < MINORS; m++)); do
		f="$STATE/dev/nvidia$m"
		if [ ! -c "$f" ] || [ "$(stat -c '%t:%T' "$f")" != "c3:$(printf '%x' "$m")" ]; then
			rm -f "$f"
			mknod -m 0600 "$f" c 195 "$m"
		fi
	done
	{
		echo "# Generated by tests/slurm/up.sh --gpus $GPUS."
		for ((i = 1; i <= NODES; i++)); do
			lo=0
			[ "$i" -ne 2 ] || lo=$GPUS
			files="$STATE/dev/nvidia$lo"
			[ "$GPUS" -eq 1 ] || files="$STATE/dev/nvidia[$lo-$((lo + GPUS - 1))]"
			echo "NodeName=gn$i Name=gpu File=$files"
		done
	} >"$STATE/gres.conf.new"
	if ! cmp -s "$STATE/gres.conf.new" "$STATE/gres.conf"; then
		mv -f "$STATE/gres.conf.new" "$STATE/gres.conf"
		GRES_CHANGED=1
	else
		rm -f "$STATE/gres.conf.new"
	fi
	chmod 0644 "$STATE/gres.conf"
else
	rm -f "$STATE/gres.conf"
fi
chmod 0644 "$CONF.new"

CONF_CHANGED=0
if ! cmp -s "$CONF.new" "$CONF" || [ $CGROUP_CHANGED -eq 1 ] || [ $GRES_CHANGED -eq 1 ]; then
	CONF_CHANGED=1
fi

# Which slurmd do we want, and which run now?
WANT_NODES=""
for ((i = 1; i <= NODES; i++)); do WANT_NODES="$WANT_NODES gn$i"; done
WANT_NODES=${WANT_NODES# }

if [ $CONF_CHANGED -eq 1 ]; then
	if [ -f "$CONF" ]; then
		log "slurm.conf changed: restarting Slurm daemons"
		diff "$CONF" "$CONF.new" >&2 || true
	fi
	# stop all slurm daemons (leave munged), including nodes no longer wanted
	for f in "$RUN"/slurmd-*.pid; do
		[ -e "$f" ] || continue
		case "$f" in *.slurm.pid) continue ;; esac
		n=$(basename "$f" .pid)
		stop_daemon "$n" "slurmd -D"
	done
	stop_daemon slurmctld "slurmctld -D" 15
	mv -f "$CONF.new" "$CONF"
else
	rm -f "$CONF.new"
fi
export_slurm_env

# ---------------------------------------------------------------- slurmctld
ctld_ok() { timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; }
if ! pid_alive slurmctld "slurmctld -D"; then
	start_daemon slurmctld "$RUN/slurmctld.out" slurmctld -D -f "$CONF"
	log "started slurmctld (pid $(pid_of slurmctld))"
fi
for ((i = 0; i < GOS_SLURM_WAIT * 10; i++)); do
	ctld_ok && break
	pid_alive slurmctld "slurmctld -D" || { dump_logs; die "slurmctld exited"; }
	sleep 0.1
done
ctld_ok || { dump_logs; die "slurmctld not answering after ${GOS_SLURM_WAIT}s"; }

# ---------------------------------------------------------------- slurmd
PS_HASH=$(plugstack_hash)
if [ -f "$RUN/plugstack.hash" ] && [ "$(cat "$RUN/plugstack.hash")" != "$PS_HASH" ]; then
	log "plugstack configuration changed since slurmd started: restarting slurmd"
	for n in $WANT_NODES; do stop_daemon "slurmd-$n" "slurmd -D"; done
fi
# shellcheck disable=SC2034 # read by lib.sh (slurmd_fresh)
FRESH_SINCE=$(date +%s)
for n in $WANT_NODES; do
	if ! pid_alive "slurmd-$n" "slurmd -D"; then
		mkdir -p "$STATE/spool/$n"
		start_daemon "slurmd-$n" "$RUN/slurmd-$n.out" slurmd -D -N "$n" -f "$CONF"
		FRESH_NODES="$FRESH_NODES $n"
		log "started slurmd $n (pid $(pid_of "slurmd-$n"))"
	fi
done
echo "$PS_HASH" >"$RUN/plugstack.hash"

wait_nodes_ready "$GOS_SLURM_WAIT" || die "cluster not ready"

# ---------------------------------------------------------------- env
cat >"$STATE/env.sh.new" <<EOF
# Generated by tests/slurm/up.sh. Source it: . $STATE/env.sh
export SLURM_CONF=$CONF
export GOS_SLURM_STATE=$STATE
export GOS_SLURM_NODES="$WANT_NODES"
export GOS_SLURM_USER=$GOS_SLURM_USER
export GOS_SLURM_JOBS=$STATE/jobs
export GOS_SLURM_PLUGSTACK_D=$STATE/plugstack.conf.d
EOF
chmod 0644 "$STATE/env.sh.new"
mv -f "$STATE/env.sh.new" "$STATE/env.sh"
log "cluster up: nodes $WANT_NODES ($(( ($(date +%s%N) - T0) / 1000000 )) ms)"
grep '^export ' "$STATE/env.sh"
