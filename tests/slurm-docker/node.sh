#!/bin/bash
# Container side of the test cluster (mounted at /cluster/node.sh).
#
#   node.sh ctl|compute|backend   entrypoint (under tini): start the daemons, then wait
#   node.sh install               install gym-otel-spank from /stage (the make install
#                                 DESTDIR tree) like an admin, then restart slurmd
#   node.sh restart               restart this container's Slurm daemon (new slurm.conf)
set -u
role=${1:?role}

log() { echo "node.sh[$(hostname)]: $*" >&2; }

start_munge() {
	install -o munge -g munge -m 0400 /cluster/munge.key /etc/munge/munge.key
	install -d -o munge -g munge -m 0711 /run/munge
	rm -f /run/munge/munged.pid
	runuser -u munge -- /usr/sbin/munged --force
}

pid_running() { # pidfile
	local p
	p=$(cat "$1" 2>/dev/null) || return 1
	[ -n "$p" ] && [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null
}

stop_pidfile() { # pidfile
	local p i
	p=$(cat "$1" 2>/dev/null) || return 0
	pid_running "$1" || return 0
	kill -TERM "$p" 2>/dev/null || return 0
	for i in $(seq 1 100); do
		pid_running "$1" || return 0
		sleep 0.1
	done
	kill -KILL "$p" 2>/dev/null || true
}

start_slurm() {
	case "$(hostname)" in
	ctl) /usr/sbin/slurmctld -i ;;
	*) /usr/sbin/slurmd ;;
	esac
}

restart_slurm() {
	case "$(hostname)" in
	ctl) stop_pidfile /run/slurmctld.pid ;;
	*) stop_pidfile /run/slurmd.pid ;;
	esac
	start_slurm
}

case "$role" in
ctl | compute)
	start_munge
	mkdir -p /var/spool/slurmd /var/spool/slurmctld
	if [ "$role" = compute ]; then
		# Debian's node_exporter, as on a real compute node.
		/usr/bin/prometheus-node-exporter --web.listen-address=127.0.0.1:9100 \
			>/var/log/slurm/node_exporter.log 2>&1 &
	fi
	start_slurm
	exec sleep infinity
	;;
backend)
	set -a
	. /secret/backend.env
	set +a
	/stage/usr/bin/otelcol-gym --config /cluster/backend.yaml >/backend/backend.log 2>&1 &
	exec sleep infinity
	;;
install)
	# What an admin does: copy the make-install tree, the site file and the
	# plugstack include, then restart slurmd (it caches plugstack.conf for
	# the job prolog/epilog).
	cp -a /stage/. /
	restart_slurm
	;;
restart)
	restart_slurm
	;;
*)
	log "unknown role $role"
	exit 2
	;;
esac
