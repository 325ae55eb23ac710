#!/bin/bash
# The guest side of `make vm-test` (tests/vm): run by the guest's one-shot
# unit gym-vm-suite.service as root, from the payload disk (/payload) the
# host made. Installs the plugin as an admin would (the make-install tree,
# the collector, slurm.conf, cgroup.conf), starts munge, an OTLP backend,
# slurmctld and slurmd through systemd, then runs the cgroup package's
# tests and the guest suite. Everything goes to the serial console and to
# /payload/out (logs, journal, timing); the exit code is the suite's.
set -u
P=/payload
O=$P/out
mkdir -p "$O"
# Everything once to the console and once to suite.log; tee has ended when
# this script returns (the unit unmounts the disk next).
if [ -z "${GYM_VM_TEED:-}" ]; then
	GYM_VM_TEED=1 "$0" "$@" 2>&1 | tee -a "$O/suite.log"
	exit "${PIPESTATUS[0]}"
fi
say() { echo "gym-vm: $*"; }
up() { cut -d' ' -f1 /proc/uptime; }
boot=$(up)
say "the suite starts ${boot} s after the kernel"
kernel=$(uname -r) cgfs=$(stat -fc %T /sys/fs/cgroup) sd=$(systemctl --version | head -1)
slurm=$(dpkg-query -W -f '${Version}' slurmd) munge=$(dpkg-query -W -f '${Version}' munge)
say "node: kernel $kernel; /sys/fs/cgroup $cgfs; PID 1 $(cat /proc/1/comm); $sd; slurm $slurm; munge $munge"
systemd-analyze time 2>&1 | head -1 | sed 's/^/gym-vm: /'
printf 'kernel=%s\ncgroupfs=%s\nsystemd=%s\nslurm=%s\nboot_seconds=%s\n' "$kernel" "$cgfs" "$sd" "$slurm" "$boot" >"$O/node"

fail() { say "FAILED: $*"; exit 1; }
waitfor() { # seconds command...
	local n=$(( $1 * 5 )); shift
	while ! "$@" >/dev/null 2>&1; do
		n=$((n - 1)); [ "$n" -gt 0 ] || return 1
		sleep 0.2
	done
}

# Install as an admin: the make-install tree, the collector, the configs.
cp -a "$P/stage/." /
install -m 0755 "$P/bin/otelcol-gym" /usr/bin/otelcol-gym
install -m 0644 "$P/conf/slurm.conf" "$P/conf/cgroup.conf" "$P/conf/gym-otel.yaml" /etc/slurm/
printf 'include /etc/slurm/plugstack.conf.d/*.conf\n' >/etc/slurm/plugstack.conf
install -d -m 1777 /jobs
install -d -o slurm -g slurm /var/spool/slurmctld /var/log/slurm
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
systemctl start munge || fail "munge did not start"

# The OTLP backend (tests/backend/backend.yaml) as a transient service.
token=tok-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkdir -p /var/lib/gym-backend
systemd-run --unit=gym-backend -E BACKEND_PORT=4318 -E BACKEND_HEALTH_PORT=13133 \
	-E BACKEND_DIR=/var/lib/gym-backend -E BACKEND_TOKEN="$token" \
	/usr/bin/otelcol-gym --config "$P/conf/backend.yaml" || fail "backend"
waitfor 120 curl -fsS http://127.0.0.1:13133/ || { journalctl -u gym-backend --no-pager | tail -20; fail "the backend is not healthy"; }

# The guest has no network card (-nic none), only lo: Slurm resolves its
# listening addresses with AI_ADDRCONFIG, which finds none without a
# configured non-loopback address. A dummy interface gives it one.
ip link add gym0 type dummy && ip addr add 10.231.30.1/24 dev gym0 && ip link set gym0 up ||
	fail "no dummy interface"
t=$(up)
systemctl start slurmctld slurmd || { journalctl -u slurmctld -u slurmd --no-pager | tail -40; fail "slurm did not start"; }
waitfor 300 sh -c 'sinfo -h -N -o %T | grep -qx idle' || {
	sinfo -N -l; tail -30 /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log; fail "node vm not idle"; }
say "slurmctld and slurmd up, node idle, in $(awk -v a="$t" -v b="$(up)" 'BEGIN{printf "%.0f", b-a}') s"

rc=0
suite_start=$(up)
t=$(up)
say "helper/cgroup tests (go test -c on the host), root, cgroup v2 under systemd"
GYM_OTEL_REQUIRE_REAL=1 "$P/bin/cgroup.test" -test.v -test.count=1 -test.timeout 20m 2>&1 | tee "$O/cgroup-test.log"
r=${PIPESTATUS[0]}
[ "$r" = 0 ] || { rc=1; say "helper/cgroup tests FAILED (exit $r)"; }
say "helper/cgroup tests: exit $r, $(awk -v a="$t" -v b="$(up)" 'BEGIN{printf "%.0f", b-a}') s"

t=$(up)
say "guest suite: real sbatch --gym-otel jobs"
run=${GYM_VM_RUN:-}
[ -s "$P/conf/run" ] && run=$(cat "$P/conf/run")
GYM_VM_TOKEN=$token GYM_VM_PAYLOAD=$P "$P/bin/guest.test" -test.v -test.count=1 -test.timeout 60m ${run:+-test.run "$run"} 2>&1 | tee "$O/guest-test.log"
r=${PIPESTATUS[0]}
[ "$r" = 0 ] || { rc=1; say "guest suite FAILED (exit $r)"; }
say "guest suite: exit $r, $(awk -v a="$t" -v b="$(up)" 'BEGIN{printf "%.0f", b-a}') s"
echo "suite_seconds=$(awk -v a="$suite_start" -v b="$(up)" 'BEGIN{printf "%.0f", b-a}')" >>"$O/node"

systemctl stop slurmd slurmctld gym-backend >/dev/null 2>&1
cp /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log "$O/" 2>/dev/null
journalctl -b --no-pager >"$O/journal.txt" 2>&1
find /sys/fs/cgroup -type d -name 'gym_otel*' >"$O/cgroups-left" 2>/dev/null
say "exit $rc"
exit "$rc"
