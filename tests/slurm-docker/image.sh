#!/usr/bin/env bash
# Build (or reuse) the base image of the test cluster for one Debian suite:
# a debootstrap minbase root filesystem with Debian's Slurm, munge,
# node_exporter, tini, then `docker import`. No registry is used.
#
#   tests/slurm-docker/image.sh bookworm     # Slurm 22.05
#   tests/slurm-docker/image.sh trixie       # Slurm 24.11
#   tests/slurm-docker/image.sh sid          # Slurm 26.05 (Debian unstable; forky has the same)
#
# Prints the image name (gym-otel-slurm:<suite>-<recipe hash>) on stdout.
# The tag carries a hash of the recipe (suite, package list, chroot steps,
# entrypoint): a present tag is reused, a changed recipe
# builds a new one (old tags are left; `docker rmi` them). The root
# filesystem lives in $GYM_OTEL_DOCKER_CACHE (default /var/cache/gym-otel-docker)
# only while building.
set -euo pipefail
suite=${1:?usage: image.sh bookworm|trixie|sid}
here=$(cd "$(dirname "$0")" && pwd)

mirror=${GYM_OTEL_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	# The host's Debian mirror (deb822 URIs: or a one-line deb entry).
	mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
		/etc/apt/sources.list.d/*.sources 2>/dev/null | grep -E '/debian/?( |$)' | head -1 |
		sed -E 's/^URIs:[[:space:]]*//; s/^deb (\[[^]]*\] )?//; s/[[:space:]].*$//' || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

packages=slurmd,slurmctld,slurm-client,munge,libslurm-dev,prometheus-node-exporter,curl,procps,tini,iproute2,ca-certificates,util-linux,nftables
# Run in the root filesystem after debootstrap: the unprivileged job user
# (same uid/gid in every container) and the daemons' directories. No init
# system starts services here: the container entrypoint (node.sh) does.
chroot_steps='
groupadd -g 2000 gymuser
useradd -m -u 2000 -g 2000 -s /bin/bash gymuser
mkdir -p /var/spool/slurmd /var/spool/slurmctld /var/log/slurm /run/munge /jobs
chown munge:munge /run/munge
chmod 0711 /run/munge
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
'
entrypoint='["/usr/bin/tini", "-s", "-g", "--"]'
# The recipe hash: suite, packages, chroot steps, entrypoint (the mirror is
# left out: the same suite from another mirror is the same recipe).
hash=$(printf '%s\n' "$suite" "$packages" "$chroot_steps" "$entrypoint" | sha256sum | cut -c1-12)
image=gym-otel-slurm:$suite-$hash

if docker image inspect "$image" >/dev/null 2>&1; then
	echo "image: $image (cached)" >&2
	echo "$image"
	exit 0
fi

cache=${GYM_OTEL_DOCKER_CACHE:-/var/cache/gym-otel-docker}
root=$cache/$suite-$hash
rm -rf "$root"
mkdir -p "$root"
echo "image: building $image from $mirror (debootstrap $suite, ~1 min)" >&2
start=$(date +%s)
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" \
	>"$cache/$suite-$hash.log" 2>&1 || { tail -30 "$cache/$suite-$hash.log" >&2; exit 1; }

chroot "$root" /bin/sh -ec "$chroot_steps"
# Debian's plugin dir, recorded for make install's SLURM_PLUGIN_DIR.
plugdir=$(cd "$root" && ls -d usr/lib/*/slurm-wlm | head -1)
ver=$(chroot "$root" dpkg-query -W -f '${Version}' slurmd)
tar -C "$root" -c . | docker import \
	-c "ENTRYPOINT $entrypoint" \
	-c "LABEL gym-otel.recipe=$hash gym-otel.suite=$suite gym-otel.slurm=$ver gym-otel.plugindir=/$plugdir" \
	- "$image" >/dev/null
rm -rf "$root"
echo "image: $image built in $(( $(date +%s) - start ))s (slurm $ver)" >&2
echo "$image"
