#!/usr/bin/env bash
# Bring the test cluster up for one Debian suite (default bookworm), with one
# slurm.conf variant (default alloc: PrologFlags=Alloc).
#
#   tests/slurm-docker/up.sh [bookworm|trixie|sid] [none|alloc|contain|contain_spank|runinjob]
#
# Builds/reuses the image (image.sh), builds the plugin against the image's
# own spank.h and installs it with `make install DESTDIR=<stage>` (plus the
# collector, the stand-ins, the site file and the plugstack include), starts
# ctl + c1 + c2 + backend with docker-compose, installs the stage on every
# node and restarts slurmd (as an admin would), waits for both nodes idle.
# Prints shell exports (GOS_*) for the tests. Idempotent: tears down first.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
variant=${2:-alloc}
t0=$(date +%s)
[ "$(id -u)" -eq 0 ] || { log "must run as root (debootstrap, docker, the job dirs' owners)"; exit 1; }
docker info >/dev/null 2>&1 || { log "the docker daemon does not answer (docker info)"; exit 1; }
for f in "$repo/build/otelcol-gym" "$repo/build/standins/gym-standin" "$repo/build/standins/vllm-standin"; do
	[ -x "$f" ] || { log "$f missing: make collector standins"; exit 1; }
done

image=$("$here/image.sh" "$suite")
t_image=$(( $(date +%s) - t0 ))
plugindir=$(docker image inspect -f '{{index .Config.Labels "gym-otel.plugindir"}}' "$image")
slurmver=$(docker image inspect -f '{{index .Config.Labels "gym-otel.slurm"}}' "$image")

"$here/down.sh" "$suite" >/dev/null 2>&1 || true
mkdir -p "$work"
rm -rf "$work/env" "$work/stage" "$work/jobs" "$work/log" "$work/backend" "$work/cluster" "$work/secret" "$work/include"
mkdir -p "$work/include" "$work/cluster" "$work/secret" "$work/backend" "$work/log"/{ctl,c1,c2}
if [ ${#compose_files[@]} -gt 2 ]; then
	port_filter=on
else
	port_filter=off # no cgroup v2 hierarchy to give the nodes (lib.sh)
	log "no unified (cgroup v2) hierarchy beside cgroup v1 on this host: the compute nodes run without the packet filter"
fi
chmod 0700 "$work/secret"
install -d -m 1777 "$work/jobs"

# The plugin against the image's spank.h; the Go core and CLI are Slurm-free.
docker run --rm --entrypoint tar "$image" -C /usr/include -c slurm | tar -x -C "$work/include"
log "building the plugin against Slurm $slurmver headers; make install DESTDIR=$work/stage"
make -s -C "$repo" install BUILD="$work/build" SLURM_INCLUDE="$work/include" \
	DESTDIR="$work/stage" PREFIX=/usr SYSCONFDIR=/etc SLURM_PLUGIN_DIR="$plugindir" >"$work/make-install.log" 2>&1 ||
	{ cat "$work/make-install.log" >&2; exit 1; }
st=$work/stage
install -m 0711 "$repo/build/otelcol-gym" "$st/usr/bin/otelcol-gym"  # as the RPM installs it
install -d "$st/opt/gym-standins"
install -m 0755 "$repo"/build/standins/* "$st/opt/gym-standins/"
printf 'include /etc/slurm/plugstack.conf.d/*.conf\n' >"$st/etc/slurm/plugstack.conf"
cat >"$st/etc/slurm/gym-otel.yaml" <<SITE
# Site file of the test cluster: the backend container, node_exporter on every node.
otel:
  endpoint: http://$net.20:4318
  service_name: gym-docker-test
  token_env: OTEL_TOKEN
  binary: /usr/bin/otelcol-gym
  gpu_metrics_port: null
  node_metrics_port: 9100
  scrape_interval_seconds: 2
  health_check_timeout_seconds: 30
  # Above three export timeouts (export_timeout_seconds, 5, the default):
  # with the backend gone, the traces, metrics and logs exporters shut down
  # one after another and each may wait one export timeout for its last
  # request; those are counted failed before the bound, so the receipt has
  # final figures (at 10 s a loaded machine killed the collector first).
  shutdown_timeout_seconds: 20
SITE
chmod -R go+rX "$st"

# Cluster config: munge key, slurm.conf, cgroup.conf, backend.
cp "$here/node.sh" "$here/backend.yaml" "$work/cluster/"
head -c 1024 /dev/urandom >"$work/cluster/munge.key"
chmod 0644 "$work/cluster/munge.key" # copied to 0400 munge:munge inside
write_conf "$variant"
if [ "$suite" != bookworm ]; then
	# 24.11+: slurmd refuses to start without a cgroup filesystem otherwise.
	echo 'CgroupPlugin=disabled' >"$work/cluster/cgroup.conf"
else
	echo '# 22.05: proctrack/linuxproc + task/none read no cgroup settings' >"$work/cluster/cgroup.conf"
fi
token="tok-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf 'BACKEND_TOKEN=%s\n' "$token" >"$work/secret/backend.env"
chmod 0600 "$work/secret/backend.env"

t1=$(date +%s)
compose up -d >"$work/compose-up.log" 2>&1 || { cat "$work/compose-up.log" >&2; exit 1; }
wait_ctld
# Install like an admin: the stage on every node (ctl is the login node), then
# restart the Slurm daemons so slurmd re-reads plugstack.conf.
for n in ctl c1 c2; do dx "$project-$n" /cluster/node.sh install; done
wait_ctld
wait_idle 90 || { dx "$project-ctl" sinfo -N -l >&2; exit 1; }
for i in $(seq 1 100); do
	curl -fsS -o /dev/null "http://$net.20:13133/" 2>/dev/null && break
	[ "$i" = 100 ] && { log "backend not healthy"; cat "$work/backend/backend.log" >&2; exit 1; }
	sleep 0.1
done
log "up: Slurm $slurmver, variant $variant, image $image (image ${t_image}s, cluster $(( $(date +%s) - t1 ))s)"
# The exports, printed and kept in $work/env (the suite reads it).
cat <<ENV | tee "$work/env"
export GOS_SUITE=$suite GOS_PROJECT=$project GOS_WORK=$work GOS_NET=$net
export GOS_IMAGE=$image GOS_SLURM_VERSION=$slurmver GOS_VARIANT=$variant
export GOS_PORT_FILTER=$port_filter
ENV
