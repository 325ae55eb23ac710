#!/usr/bin/env bash
# make vm-test: boot the cgroup v2 + systemd guest (tests/vm/image.sh) under
# qemu (TCG when there is no /dev/kvm or its KVM cannot boot the guest)
# and run the guest suite inside it.
#
#   tests/vm/run.sh
#
# Builds the plugin against the guest's Slurm headers (make install
# DESTDIR=<payload>/stage), the cgroup package's tests and the guest suite
# (go test -c, static), the forged-spec submitter (against the guest's
# libslurm), and puts them with the collector and the configs on a second
# disk (ext4, mkfs.ext4 -d). The guest's unit runs the suite from it and
# powers off; the results come back on that disk (debugfs rdump, no mount)
# and the serial console is printed as it runs. The guest resets itself
# once, hard, mid-job (sysrq b) after the suite and runs a second phase at
# the next boot: qemu runs without -no-reboot, so a reset boots the same
# disks again (-snapshot's overlay of the cached image lives as long as the
# qemu process, so the second boot finds the first one's writes, as a node
# finds its disk). Exits non-zero when the
# suite fails, when the guest does not finish within GYM_OTEL_VM_TIMEOUT
# seconds (default 3600), or when it leaves no exit code.
#
# Environment: GYM_OTEL_VM_CACHE (image cache, /var/cache/gym-otel-vm),
# GYM_OTEL_VM_WORK (payload, console log, results, /var/tmp/gym-otel-vm),
# GYM_VM_RUN (a -test.run pattern for the guest suite), GYM_OTEL_VM_SMP,
# GYM_OTEL_VM_MEM (2, 3G), GYM_OTEL_VM_ACCEL (kvm where /dev/kvm is
# writable and a probe boot under it reaches the kernel's end of start,
# tests/vm/accel.sh; else tcg,thread=multi).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/slurm_conf.sh
. "$here/slurm_conf.sh"
repo=$(cd "$here/../.." && pwd)
export PATH=/usr/local/go/bin:$PATH
log() { echo "vm-test: $*" >&2; }
[ "$(id -u)" -eq 0 ] || { log "must run as root (debootstrap, chroot)"; exit 1; }
# What it needs beyond .ci/install-deps.sh, installed as the other make
# targets install theirs: qemu (TCG), debootstrap, debugfs (e2fsprogs).
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v debugfs >/dev/null || need+=(e2fsprogs)
if [ ${#need[@]} -gt 0 ]; then
	log "installing ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
fi
[ -x "$repo/build/otelcol-gym" ] || { log "$repo/build/otelcol-gym missing: make collector"; exit 1; }

t0=$(date +%s)
image=$("$here/image.sh")
t_image=$(( $(date +%s) - t0 ))
plugindir=$(cat "$image/plugindir")

t1=$(date +%s)
work=${GYM_OTEL_VM_WORK:-/var/tmp/gym-otel-vm}
pl=$work/payload
rm -rf "$pl" "$work/out" "$work/payload.img"
mkdir -p "$pl/bin" "$pl/conf" "$work/build"
log "building the plugin against the guest's Slurm headers ($(grep '^slurm=' "$image/versions"))"
make -s -C "$repo" install BUILD="$work/build" SLURM_INCLUDE="$image/include" \
	DESTDIR="$pl/stage" PREFIX=/usr SYSCONFDIR=/etc SLURM_PLUGIN_DIR="$plugindir" >"$work/make-install.log" 2>&1 ||
	{ cat "$work/make-install.log" >&2; exit 1; }
# A collector start under TCG takes seconds: the prolog gets 120 s
# (below slurm.conf's PrologEpilogTimeout).
sed -i '/^required /s/$/ prolog_timeout=120/' "$pl/stage/etc/slurm/plugstack.conf.d/gym-otel.conf"
install -m 0755 "$repo/build/otelcol-gym" "$pl/bin/otelcol-gym"
(cd "$repo" && CGO_ENABLED=0 go test -c -o "$pl/bin/cgroup.test" ./helper/cgroup &&
	CGO_ENABLED=0 go test -c -o "$pl/bin/portfilter.test" ./helper/portfilter &&
	CGO_ENABLED=0 go test -c -tags vmguest -o "$pl/bin/guest.test" ./tests/vm/guest)
# The other user's attacker of the output-dir swap race (the host's
# tests/standins dirswap-standin, static).
(cd "$repo/tests/standins" && CGO_ENABLED=0 go build -o "$pl/bin/dirswap" ./cmd/dirswap-standin)
# The other user's listener of the port filter's tests (static: the guest
# has no compiler).
gcc -O2 -static -o "$pl/bin/squat" "$repo/tests/plugin/testdata/squat.c"
gcc -O2 -I"$image/include" -o "$pl/bin/forge" "$repo/tests/plugin/testdata/forge.c" \
	-L"$image/lib" -lslurm -Wl,--allow-shlib-undefined
# helper/portfilter's tests read their testdata from their working dir.
mkdir -p "$pl/portfilter"
cp -a "$repo/helper/portfilter/testdata" "$pl/portfilter/"
install -m 0755 "$here/guest/run.sh" "$pl/run.sh"
cp "$here/guest/cgroup.conf" "$here/guest/gym-otel.yaml" "$repo/tests/backend/backend.yaml" "$pl/conf/"
guest_slurm_conf >"$pl/conf/slurm.conf"
[ -n "${GYM_VM_RUN:-}" ] && printf '%s\n' "$GYM_VM_RUN" >"$pl/conf/run"
chmod -R go+rX "$pl"
mb=$(du -sm "$pl" | cut -f1)
truncate -s $(( mb + 256 ))M "$work/payload.img"
mkfs.ext4 -q -L gympayload -d "$pl" "$work/payload.img"
t_payload=$(( $(date +%s) - t1 ))

log "booting $image (root.img read-only through -snapshot) with $work/payload.img; console in $work/console.log"
t2=$(date +%s)
# The accelerator: KVM only where a probe boot shows this host's KVM boots
# the guest's kernel (accel.sh; a nested KVM can stop the boot with an
# emulation failure and never exit), else TCG; GYM_OTEL_VM_ACCEL chooses.
accel=${GYM_OTEL_VM_ACCEL:-$(bash "$here/accel.sh" "$image/vmlinuz")}
# boot ACCEL: the guest's whole run, its console to the terminal and to
# console.log; under KVM a console that says "KVM internal error" ends it
# (exit 125) so that the run goes on under TCG. A guest whose systemd
# froze at a boot (PID 1 says "Freezing execution" and never recovers;
# seen after the reset mid-job when the host is so loaded that systemd's
# generators time out: "Failed to fork off sandboxing environment for
# executing generators: Protocol error", systemd issue 39354) ends it too
# (exit 126), instead of waiting for the whole timeout.
boot() {
	timeout "${GYM_OTEL_VM_TIMEOUT:-3600}" qemu-system-x86_64 -M q35 -accel "$1" -cpu max \
		-m "${GYM_OTEL_VM_MEM:-3G}" -smp "${GYM_OTEL_VM_SMP:-2}" \
		-kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
		-append 'root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 panic=-1 quiet' \
		-drive file="$image/root.img",if=virtio,format=raw,snapshot=on \
		-drive file="$work/payload.img",if=virtio,format=raw \
		-nic none -nographic </dev/null >"$work/console.log" 2>&1 &
	local q=$! r
	tail -n +1 -F --pid=$q "$work/console.log" 2>/dev/null &
	while kill -0 "$q" 2>/dev/null; do
		if [ "${1%%,*}" = kvm ] && grep -q 'KVM internal error' "$work/console.log"; then
			kill "$q"
			wait "$q"
			return 125
		fi
		if grep -q 'Freezing execution' "$work/console.log"; then
			kill "$q"
			wait "$q"
			return 126
		fi
		sleep 2
	done
	wait "$q"
	r=$?
	sleep 0.5
	return $r
}
set +e
boot "$accel"
qrc=$?
if [ "$qrc" = 125 ]; then
	log "KVM stopped the guest's boot ($(grep -m1 'KVM internal error' "$work/console.log")): booting again under TCG"
	accel=tcg,thread=multi
	rm -f "$work/payload.img"
	truncate -s $(( mb + 256 ))M "$work/payload.img"
	mkfs.ext4 -q -L gympayload -d "$pl" "$work/payload.img"
	boot "$accel"
	qrc=$?
fi
set -e
t_qemu=$(( $(date +%s) - t2 ))
[ "$qrc" = 124 ] && { log "FAILED: the guest did not power off within ${GYM_OTEL_VM_TIMEOUT:-3600} s"; exit 1; }
# A frozen boot: say why, then report what the guest wrote before it.
[ "$qrc" = 126 ] && log "the guest's systemd froze at a boot ($(grep -a -o -m1 'systemd\[1\]: Failed.*' "$work/console.log" | head -1 | tr -d '\r')): the host was too loaded for the guest under $accel; run again on a quieter host"

debugfs -R "rdump /out $work" "$work/payload.img" >/dev/null 2>&1 || true
rc=$(cat "$work/out/rc" 2>/dev/null || echo none)
boot=$(sed -n 's/^boot_seconds=//p' "$work/out/node" 2>/dev/null)
suite=$(sed -n 's/^suite_seconds=//p' "$work/out/node" 2>/dev/null)
boot2=$(sed -n 's/^boot2_seconds=//p' "$work/out/node" 2>/dev/null)
phase2=$(sed -n 's/^phase2_seconds=//p' "$work/out/node" 2>/dev/null)
log "ran on: $(grep -E '^(kernel|cgroupfs|systemd|slurm)=' "$work/out/node" 2>/dev/null | tr '\n' ' ')"
log "image ${t_image} s ($( [ "$t_image" -lt 30 ] && echo cached || echo built)), payload ${t_payload} s, qemu ${t_qemu} s ($accel): boot to the suite ${boot:-?} s, tests ${suite:-?} s; after the reset mid-job: boot to the suite ${boot2:-?} s, phase 2 ${phase2:-?} s; results in $work/out"
[ "$rc" = 0 ] || { log "FAILED: the guest suite's exit code is $rc (see $work/out/*.log)"; exit 1; }
log "passed"
