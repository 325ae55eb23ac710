#!/bin/bash
# The guest side of `make vm-test` (tests/vm): run by the guest's one-shot
# unit gym-vm-suite.service as root, from the payload disk (/payload) the
# host made. Installs the plugin as an admin would (the make-install tree,
# the collector, slurm.conf, cgroup.conf), starts munge, an OTLP backend,
# slurmctld and slurmd through systemd, then runs the cgroup package's
# tests and the guest suite. Everything goes to the serial console and to
# /payload/out (logs, journal, timing); the exit code is the suite's.
#
# Two boots: after the suite, phase 1 starts one flagged job
# (TestRebootMidJob), leaves the marker out/reboot-pending on the payload
# disk, syncs and resets the guest hard (sysrq b: no shutdown, no epilog).
# qemu boots the same disks again (no -no-reboot; -snapshot's overlay lives
# as long as qemu), the unit runs this script again, which finds the marker
# and runs phase 2 (TestAfterReboot): Slurm started as after any boot, the
# node's state, the plugin's groups, records and processes, the next
# flagged job's sweep. A boot that finds out/started but no marker is an
# unexpected reboot (a panic): it fails at once and powers off.
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
since() { awk -v a="$1" -v b="$(up)" 'BEGIN{printf "%.0f", b-a}'; }
boot=$(up)
phase=1
if [ -e "$O/reboot-pending" ]; then
	phase=2
	rm -f "$O/reboot-pending"
	sync
elif [ -e "$O/started" ]; then
	say "FAILED: the guest booted again without a reboot the suite asked for (a panic? see the console)"
	exit 1
fi
touch "$O/started"
sync
say "phase $phase: the suite starts ${boot} s after the kernel"
kernel=$(uname -r) cgfs=$(stat -fc %T /sys/fs/cgroup) sd=$(systemctl --version | head -1)
slurm=$(dpkg-query -W -f '${Version}' slurmd) munge=$(dpkg-query -W -f '${Version}' munge)
say "node: kernel $kernel; /sys/fs/cgroup $cgfs; PID 1 $(cat /proc/1/comm); $sd; slurm $slurm; munge $munge; boot id $(cat /proc/sys/kernel/random/boot_id)"
systemd-analyze time 2>&1 | head -1 | sed 's/^/gym-vm: /'
if [ "$phase" = 1 ]; then
	printf 'kernel=%s\ncgroupfs=%s\nsystemd=%s\nslurm=%s\nboot_seconds=%s\n' "$kernel" "$cgfs" "$sd" "$slurm" "$boot" >"$O/node"
else
	printf 'boot2_seconds=%s\n' "$boot" >>"$O/node"
fi

fail() { say "FAILED: $*"; exit 1; }
waitfor() { # seconds command...
	local n=$(( $1 * 5 )); shift
	while ! "$@" >/dev/null 2>&1; do
		n=$((n - 1)); [ "$n" -gt 0 ] || return 1
		sleep 0.2
	done
}

# Install as an admin: the make-install tree, the collector, the configs
# (once: phase 2 boots the node as it was left).
if [ "$phase" = 1 ]; then
	cp -a "$P/stage/." /
	install -m 0755 "$P/bin/otelcol-gym" /usr/bin/otelcol-gym
	install -m 0644 "$P/conf/slurm.conf" "$P/conf/cgroup.conf" "$P/conf/gym-otel.yaml" /etc/slurm/
	printf 'include /etc/slurm/plugstack.conf.d/*.conf\n' >/etc/slurm/plugstack.conf
	install -d -m 1777 /jobs
	install -d -o slurm -g slurm /var/spool/slurmctld /var/log/slurm
	[ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
	chown munge:munge /etc/munge/munge.key
	chmod 0400 /etc/munge/munge.key
	sync
fi
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

# The logs of one phase, to the payload disk.
keep_logs() { # suffix
	cp /var/log/slurm/slurmd.log "$O/slurmd$1.log" 2>/dev/null
	cp /var/log/slurm/slurmctld.log "$O/slurmctld$1.log" 2>/dev/null
	journalctl -b --no-pager >"$O/journal$1.txt" 2>&1
	find /sys/fs/cgroup -type d -name 'gym_otel*' >"$O/cgroups-left$1" 2>/dev/null
}

if [ "$phase" = 2 ]; then
	# After the reset: Slurm started as after any boot. The controller is
	# on this node and rebooted with it, which a cluster's controller does
	# not: slurmctld recovers the job as running on vm and counts it as
	# active from its own start, so slurmd's registration ends the job
	# (missing on a node booted after the job started) only once
	# BatchStartTimeout + 10 s + ResumeTimeout (80 s) have passed since.
	# slurmd starts 90 s after slurmctld, as a node that comes back to a
	# controller that stayed up. TestAfterReboot waits for the node's state.
	t=$(up)
	systemctl start slurmctld || { journalctl -u slurmctld --no-pager | tail -40; fail "slurmctld did not start after the reboot"; }
	sleep 90
	systemctl start slurmd || { journalctl -u slurmd --no-pager | tail -40; fail "slurmd did not start after the reboot"; }
	say "after the reboot: slurmctld started, slurmd 90 s later, in $(since "$t") s"
	t=$(up)
	GYM_VM_PHASE=after-reboot GYM_VM_TOKEN=$token GYM_VM_PAYLOAD=$P GYM_VM_RECORD_DIR=/var/lib/gym-otel \
		GYM_VM_REBOOT_INFO=$O/reboot-job "$P/bin/guest.test" -test.v -test.count=1 -test.timeout 30m \
		-test.run 'TestAfterReboot' 2>&1 | tee "$O/after-reboot-test.log"
	r=${PIPESTATUS[0]}
	grep -q '^--- PASS: TestAfterReboot' "$O/after-reboot-test.log" || r=1
	say "after the reboot: exit $r, $(since "$t") s"
	echo "phase2_seconds=$(since "$t")" >>"$O/node"
	rc=$(cat "$O/rc-phase1" 2>/dev/null || echo 1)
	[ "$r" = 0 ] || rc=1
	systemctl stop slurmd slurmctld gym-backend >/dev/null 2>&1
	keep_logs ""
	say "exit $rc"
	exit "$rc"
fi

t=$(up)
systemctl start slurmctld slurmd || { journalctl -u slurmctld -u slurmd --no-pager | tail -40; fail "slurm did not start"; }
waitfor 300 sh -c 'sinfo -h -N -o %T | grep -qx idle' || {
	sinfo -N -l; tail -30 /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log; fail "node vm not idle"; }
say "slurmctld and slurmd up, node idle, in $(since "$t") s"

rc=0
suite_start=$(up)
t=$(up)
say "helper/cgroup tests (go test -c on the host), root, cgroup v2 under systemd"
GYM_OTEL_REQUIRE_REAL=1 "$P/bin/cgroup.test" -test.v -test.count=1 -test.timeout 20m 2>&1 | tee "$O/cgroup-test.log"
r=${PIPESTATUS[0]}
[ "$r" = 0 ] || { rc=1; say "helper/cgroup tests FAILED (exit $r)"; }
say "helper/cgroup tests: exit $r, $(since "$t") s"

t=$(up)
say "helper/portfilter tests: the packet filter on cgroup v2"
(cd "$P/portfilter" && GYM_OTEL_REQUIRE_REAL=1 "$P/bin/portfilter.test" -test.v -test.count=1 -test.timeout 5m) 2>&1 | tee "$O/portfilter-test.log"
r=${PIPESTATUS[0]}
[ "$r" = 0 ] || { rc=1; say "helper/portfilter tests FAILED (exit $r)"; }
say "helper/portfilter tests: exit $r, $(since "$t") s"

t=$(up)
say "guest suite: real sbatch --gym-otel jobs"
run=${GYM_VM_RUN:-}
[ -s "$P/conf/run" ] && run=$(cat "$P/conf/run")
GYM_VM_TOKEN=$token GYM_VM_PAYLOAD=$P "$P/bin/guest.test" -test.v -test.count=1 -test.timeout 60m ${run:+-test.run "$run"} 2>&1 | tee "$O/guest-test.log"
r=${PIPESTATUS[0]}
[ "$r" = 0 ] || { rc=1; say "guest suite FAILED (exit $r)"; }
say "guest suite: exit $r, $(since "$t") s"
echo "suite_seconds=$(since "$suite_start")" >>"$O/node"

# The reboot mid-job, unless a -test.run pattern leaves it out. The site
# keeps its records on disk (record_dir=/var/lib/gym-otel: /run, the
# default, is empty after any boot), so that the record of the job the
# reset ends is still there for the next prolog's sweep.
if [ -z "$run" ] || echo TestRebootMidJob | grep -Eq -- "$run"; then
	t=$(up)
	sed -i '/^required /s|$| record_dir=/var/lib/gym-otel|' /etc/slurm/plugstack.conf.d/gym-otel.conf
	say "reboot mid-job: $(grep '^required ' /etc/slurm/plugstack.conf.d/gym-otel.conf)"
	systemctl restart slurmd
	waitfor 300 sh -c 'sinfo -h -N -o %T | grep -qx idle' || fail "node vm not idle after slurmd's restart"
	GYM_VM_PHASE=reboot GYM_VM_TOKEN=$token GYM_VM_PAYLOAD=$P GYM_VM_RECORD_DIR=/var/lib/gym-otel \
		GYM_VM_REBOOT_INFO=$O/reboot-job "$P/bin/guest.test" -test.v -test.count=1 -test.timeout 20m \
		-test.run 'TestRebootMidJob' 2>&1 | tee "$O/reboot-test.log"
	r=${PIPESTATUS[0]}
	if [ "$r" = 0 ] && grep -q '^--- PASS: TestRebootMidJob' "$O/reboot-test.log" && [ -s "$O/reboot-job" ]; then
		echo "$rc" >"$O/rc-phase1"
		keep_logs "-phase1"
		echo "reboot_prep_seconds=$(since "$t")" >>"$O/node"
		touch "$O/reboot-pending"
		say "reboot mid-job: job $(sed -n 's/^job=//p' "$O/reboot-job") runs; sync, then a hard reset (sysrq b) $(up) s after the kernel"
		sleep 1 # tee has the line above
		sync
		echo b >/proc/sysrq-trigger
		sleep 600
		fail "sysrq b did not reset the guest"
	fi
	rc=1
	say "reboot mid-job FAILED before the reset (exit $r)"
fi

systemctl stop slurmd slurmctld gym-backend >/dev/null 2>&1
keep_logs ""
say "exit $rc"
exit "$rc"
