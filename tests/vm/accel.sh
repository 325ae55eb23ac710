#!/usr/bin/env bash
# The qemu accelerator for the guest: prints "kvm" when this host's KVM
# boots the guest's kernel, else "tcg,thread=multi"; says which and why on
# standard error.
#
#   tests/vm/accel.sh VMLINUZ
#
# A /dev/kvm may be there and still not boot the guest: a nested KVM that
# cannot emulate an instruction the kernel runs stops the boot early with
# "KVM internal error ... emulation failure", and qemu then neither exits
# nor boots. So KVM is chosen only after a probe boot of the same kernel
# under it: no root file system and no initrd, so the kernel runs its whole
# start and panics for want of a root ("Kernel panic - not syncing"),
# panic=-1 resets at once and -no-reboot makes qemu exit. A probe that does
# not get there within GYM_OTEL_VM_KVM_PROBE_SECONDS (60) means TCG.
#
# Environment: GYM_OTEL_VM_KVM_DEV (/dev/kvm), GYM_OTEL_VM_QEMU
# (qemu-system-x86_64), GYM_OTEL_VM_KVM_PROBE_SECONDS (60).
set -uo pipefail
kernel=${1:?usage: accel.sh VMLINUZ}
dev=${GYM_OTEL_VM_KVM_DEV:-/dev/kvm}
qemu=${GYM_OTEL_VM_QEMU:-qemu-system-x86_64}
limit=${GYM_OTEL_VM_KVM_PROBE_SECONDS:-60}
tcg=tcg,thread=multi
say() { echo "vm-test: $*" >&2; }
if [ ! -w "$dev" ]; then
	say "no writable $dev: TCG"
	echo "$tcg"
	exit 0
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
timeout -k 5 "$limit" "$qemu" -M q35 -accel kvm -cpu max -m 512M -smp 1 \
	-kernel "$kernel" -append 'console=ttyS0 panic=-1 loglevel=4' \
	-no-reboot -nic none -nographic </dev/null >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if grep -q 'Kernel panic' "$out"; then
	say "KVM boots the guest's kernel (probe ${took} s): KVM"
	echo kvm
	exit 0
fi
why="it did not reach the end of its start within ${limit} s"
[ "$rc" = 124 ] || why="qemu exited with $rc"
grep -q 'KVM internal error' "$out" && why="KVM internal error: $(grep -m1 -A1 'KVM internal error' "$out" | tr '\n' ' ' | cut -c1-160)"
say "this host's KVM does not boot the guest's kernel ($why): TCG"
echo "$tcg"
