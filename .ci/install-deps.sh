#!/usr/bin/env bash
# Install every Debian package the project's tests need (Debian 12, as root).
# Idempotent and non-interactive: does nothing when all are installed already.
#
#   .ci/install-deps.sh            install what is missing
#   .ci/install-deps.sh --check    exit 1 (listing them) if some are missing
set -euo pipefail

PKGS=(
	# real Slurm 22.05 + munge, and spank.h for the plugin
	slurm-wlm slurmctld slurmd slurm-client slurm-wlm-basic-plugins
	munge libslurm-dev
	# a real node_exporter for the collector tests
	prometheus-node-exporter
	# the node's packet filter that keeps a job's ports to the job
	nftables
	# plugin build, packaging, man pages
	gcc make libc6-dev pkg-config pandoc rpm
	# containers / root filesystems for the multi-host tests; the docker
	# cluster (tests/slurm-docker) also needs a running docker daemon
	bubblewrap debootstrap docker-compose
	# otel.container under rootless Podman (helper/supervise
	# TestContainerPodman); runc, as Debian 12's crun refuses a host with
	# a cgroup v1 hierarchy beside a v2 one that has controllers
	podman runc uidmap
	# inspect --html: Chart.js inlined into the page; a real headless
	# browser opens it in the tests
	libjs-chart.js chromium
	# test tooling
	curl ca-certificates procps jq psmisc iproute2 util-linux passwd
	coreutils findutils sed grep diffutils
	# man -l renders the built man pages; python3 sets a signal mask
	# before it execs the supervisor (a lifecycle test)
	man-db python3
)

missing() {
	local p st
	for p in "${PKGS[@]}"; do
		st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
		[ "$st" = installed ] || echo "$p"
	done
}

MISSING=$(missing | tr '\n' ' ')
if [ "${1:-}" = --check ]; then
	if [ -n "${MISSING// /}" ]; then
		echo "missing: $MISSING" >&2
		exit 1
	fi
	exit 0
fi
if [ -z "${MISSING// /}" ]; then
	echo "install-deps: all ${#PKGS[@]} packages installed" >&2
	exit 0
fi

[ "$(id -u)" -eq 0 ] || { echo "install-deps: must run as root (missing: $MISSING)" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
# Daemons must not be started by the packages' maintainer scripts: the tests
# start their own (tests/slurm/up.sh). Keep a policy-rc.d only for this run.
POLICY=/usr/sbin/policy-rc.d
POLICY_ADDED=0
if [ ! -e "$POLICY" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$POLICY"
	chmod 0755 "$POLICY"
	POLICY_ADDED=1
fi
cleanup() { [ $POLICY_ADDED -eq 1 ] && rm -f "$POLICY"; return 0; }
trap cleanup EXIT

echo "install-deps: installing: $MISSING" >&2
apt-get update -q </dev/null
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
	$MISSING </dev/null

LEFT=$(missing | tr '\n' ' ')
if [ -n "${LEFT// /}" ]; then
	echo "install-deps: still missing after apt-get: $LEFT" >&2
	exit 1
fi
echo "install-deps: done" >&2
