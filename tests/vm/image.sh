#!/usr/bin/env bash
# Build (or reuse) the guest of `make vm-test`: a Debian sid root file system
# made with debootstrap (systemd as PID 1, Debian's kernel, munge, Slurm
# 26.05) as a raw ext4 image, with the kernel and initrd beside it.
#
#   tests/vm/image.sh            prints the image's directory on stdout
#
# Why sid: Slurm 26.05 (its cgroup/v2 plugin names the job's cgroup
# directories after the job's SLUID), the release the docker suite's sid
# image already runs; trixie has 24.11.
#
# The directory is $GYM_OTEL_VM_CACHE/<hash> (default /var/cache/gym-otel-vm),
# the hash of the recipe (suite, package list, chroot steps, the suite's
# unit): a present directory with a complete image is reused, a changed
# recipe builds a new one (old ones are left; rm -rf them). It holds
# root.img (the root file system; booted read-only through qemu's
# -snapshot, so it never changes), vmlinuz, initrd.img, include/slurm (the
# guest's Slurm headers, to build the plugin against), plugindir and
# versions (what the guest runs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
suite=sid

mirror=${GYM_OTEL_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	# The host's Debian mirror (deb822 URIs: or a one-line deb entry).
	mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
		/etc/apt/sources.list.d/*.sources 2>/dev/null | grep -E '/debian/?( |$)' | head -1 |
		sed -E 's/^URIs:[[:space:]]*//; s/^deb (\[[^]]*\] )?//; s/[[:space:]].*$//' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

packages=systemd,systemd-sysv,udev,dbus,linux-image-amd64,dracut,kmod,slurmd,slurmctld,slurm-client,munge,libslurm-dev,procps,util-linux,iproute2,ca-certificates,curl,nftables,apptainer,squashfs-tools,squashfuse
# The suite's unit: mounts the payload disk (/dev/vdb, made per run by
# tests/vm/run.sh), runs its run.sh with the console as output, records the
# exit code on that disk, and powers the guest off whatever happens.
unit='[Unit]
Description=gym-otel-spank guest suite (make vm-test)
After=multi-user.target
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/gym-vm-suite
StandardOutput=tty
StandardError=inherit
TTYPath=/dev/ttyS0
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
'
suite_sh='#!/bin/sh
mkdir -p /payload
mount -t ext4 /dev/vdb /payload || { echo "gym-vm: no payload disk (/dev/vdb)"; exit 1; }
mkdir -p /payload/out
/payload/run.sh
rc=$?
echo "$rc" > /payload/out/rc
sync
umount /payload
exit "$rc"
'
# The initrd: sid's kernel takes dracut; made again for any machine
# (no host-only), with the virtio disk and ext4 drivers.
initrd_steps='
printf "hostonly=\"no\"\nadd_drivers+=\" virtio_pci virtio_blk ext4 \"\n" > /etc/dracut.conf.d/90-gymvm.conf
for k in $(ls /lib/modules); do dracut --force --no-hostonly /boot/initrd.img-$k $k; done
'
# Run in the root file system after debootstrap: the job user, the node's
# name, no console login or first-boot prompt on the serial line, Slurm's
# daemons off until the suite has written their configuration (it starts
# them as an admin would), the suite's unit on.
chroot_steps='
groupadd -g 2000 gymuser
useradd -m -u 2000 -g 2000 -s /bin/bash gymuser
echo vm > /etc/hostname
printf "127.0.0.1 localhost\n127.0.1.1 vm\n" > /etc/hosts
printf "/dev/vda / ext4 rw,errors=remount-ro 0 1\n" > /etc/fstab
echo 6a1f0c3b9d8e4f7a8b2c1d0e9f8a7b6c > /etc/machine-id
passwd -d root
systemctl mask serial-getty@ttyS0.service getty@tty1.service systemd-firstboot.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer man-db.timer 2>/dev/null || true
systemctl disable slurmd.service slurmctld.service 2>/dev/null || true
systemctl enable gym-vm-suite.service
mkdir -p /var/spool/slurmd /var/spool/slurmctld /var/log/slurm
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
'
hash=$(printf '%s\n' "$suite" "$packages" "$unit" "$suite_sh" "$chroot_steps" "$initrd_steps" | sha256sum | cut -c1-12)
cache=${GYM_OTEL_VM_CACHE:-/var/cache/gym-otel-vm}
out=$cache/$hash

if [ -s "$out/versions" ]; then
	echo "vm image: $out (cached)" >&2
	echo "$out"
	exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "vm image: building needs root (debootstrap, chroot)" >&2; exit 1; }
root=$cache/$hash.root
# Never remove a tree with /dev bound into it.
unmount_root() { for m in dev sys proc; do mountpoint -q "$root/$m" 2>/dev/null && umount "$root/$m"; done; return 0; }
unmount_root
trap unmount_root EXIT
rm -rf --one-file-system "$root" "$out"
mkdir -p "$root" "$out"
echo "vm image: building $out from $mirror (debootstrap $suite, a few minutes)" >&2
start=$(date +%s)
# Downloaded packages are kept in $cache/debs for the next build.
mkdir -p "$cache/debs"
debootstrap --variant=minbase --cache-dir="$cache/debs" --include="$packages" "$suite" "$root" "$mirror" \
	>"$cache/$hash.log" 2>&1 || { tail -30 "$cache/$hash.log" >&2; exit 1; }
printf '%s' "$unit" >"$root/etc/systemd/system/gym-vm-suite.service"
printf '%s' "$suite_sh" >"$root/usr/local/sbin/gym-vm-suite"
chmod 0755 "$root/usr/local/sbin/gym-vm-suite"
chroot "$root" /bin/sh -ec "$chroot_steps" >>"$cache/$hash.log" 2>&1 || { tail -30 "$cache/$hash.log" >&2; exit 1; }
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
rc=0
chroot "$root" /bin/sh -ec "$initrd_steps" >>"$cache/$hash.log" 2>&1 || rc=$?
unmount_root
[ "$rc" = 0 ] || { tail -30 "$cache/$hash.log" >&2; exit 1; }

kver=$(cd "$root/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//' | sort -V | tail -1)
[ -n "$kver" ] && [ -f "$root/boot/initrd.img-$kver" ] || { echo "vm image: no kernel/initrd in $root/boot" >&2; exit 1; }
cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$out/initrd.img"
mkdir -p "$out/include"
cp -a "$root/usr/include/slurm" "$out/include/"
(cd "$root" && ls -d usr/lib/*/slurm-wlm | head -1 | sed 's|^|/|') >"$out/plugindir"
# The guest's libslurm, for the forged-spec submitter built on the host.
mkdir -p "$out/lib"
cp -a "$root"/usr/lib/*/libslurm.so* "$out/lib/" 2>/dev/null || true

# The root file system: its size plus 1 GiB of room (job dirs, logs).
mb=$(du -sm "$root" | cut -f1)
truncate -s $(( mb + 1024 ))M "$out/root.img.tmp"
mkfs.ext4 -q -L gymroot -d "$root" "$out/root.img.tmp"
mv "$out/root.img.tmp" "$out/root.img"
{
	echo "kernel=$kver"
	echo "systemd=$(chroot "$root" dpkg-query -W -f '${Version}' systemd)"
	echo "slurm=$(chroot "$root" dpkg-query -W -f '${Version}' slurmd)"
	echo "munge=$(chroot "$root" dpkg-query -W -f '${Version}' munge)"
	echo "built_seconds=$(( $(date +%s) - start ))"
} >"$out/versions.tmp"
unmount_root
rm -rf --one-file-system "$root"
mv "$out/versions.tmp" "$out/versions"
echo "vm image: built in $(( $(date +%s) - start ))s: $(tr '\n' ' ' <"$out/versions")" >&2
echo "$out"
