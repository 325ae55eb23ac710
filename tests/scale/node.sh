#!/usr/bin/env bash
# What one job's collector costs its node: CPU (utime+stime ticks of the
# collector process from /proc/<pid>/stat, as a fraction of one core) and
# memory (VmRSS, Pss from smaps_rollup), idle with the default scrape targets
# (Debian's node_exporter and the dcgm-exporter stand-in, each on a port of
# its own, every 15 s) and under OTLP span load (tests/bench/loadgen,
# protobuf over HTTP, 200 spans per request). The collector is started the
# way the prolog starts it, by `gym-otel-spank supervise` as the job's user,
# with the configuration the plugin renders. Then, to see what dominates,
# the same collector configuration with one part taken out at a time, run
# directly (no supervisor) for shorter windows.
#
#   tests/scale/node.sh [--idle SECONDS] [--load SECONDS] [--rate SPANS_PER_S] [--variants 0|1]
#
# GOS_SCALE_VARIANTS picks the variants (default: as-rendered no-scrape
# no-spanmetrics no-files no-backend no-transform gzip-default-level; also
# gzip-level-1, scrape-proto, gogc-200); GOS_SCALE_NODE_PORT_BASE (19850)
# moves its ports (backend, backend health, node_exporter, dcgm stand-in).
#
# Root. Tables on stdout (also build/bench-scale/node/result.txt).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
IDLE=300
LOAD=60
RATE=10000
VARIANTS=1
while [ $# -gt 0 ]; do
	case "$1" in
	--idle) IDLE=${2:?}; shift 2 ;;
	--load) LOAD=${2:?}; shift 2 ;;
	--rate) RATE=${2:?}; shift 2 ;;
	--variants) VARIANTS=${2:?}; shift 2 ;;
	*) echo "usage: $0 [--idle S] [--load S] [--rate N] [--variants 0|1]" >&2; exit 2 ;;
	esac
done
BASE=/var/lib/gym-otel-scale/node
OUT=$REPO/build/bench-scale/node
PORT0=${GOS_SCALE_NODE_PORT_BASE:-19850}
BACKEND_PORT=$PORT0 BACKEND_HEALTH=$((PORT0 + 1)) NODE_PORT=$((PORT0 + 2)) DCGM_PORT=$((PORT0 + 3))
TOKEN=node-token-81c2e4
USER_NAME=${GOS_SLURM_USER:-gymscale}
COL=${GYM_OTEL_COLLECTOR:-$REPO/build/otelcol-gym}
CLI=$REPO/build/gym-otel-spank
LOADGEN=$REPO/build/bench/loadgen
HZ=$(getconf CLK_TCK)

log() { printf '%s [node] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root"
for f in "$COL" "$CLI" "$LOADGEN" "$REPO/build/standins/dcgm-standin" /usr/bin/prometheus-node-exporter; do
	[ -x "$f" ] || die "$f missing (make build collector standins; go build -o build/bench/ ./tests/bench/loadgen; apt-get install prometheus-node-exporter)"
done
id "$USER_NAME" >/dev/null 2>&1 || useradd -m -s /bin/bash "$USER_NAME"
T0=$(date +%s)
rm -rf "$BASE" "$OUT"
mkdir -p "$BASE" "$OUT"
chmod 0755 "$BASE"

PIDS=()
BACKEND_PID=""
SUP_PID=""
cleanup() {
	local p
	[ -n "$SUP_PID" ] && kill -TERM "$SUP_PID" 2>/dev/null && wait "$SUP_PID" 2>/dev/null || true
	for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$p" 2>/dev/null || true; done
	[ -n "$BACKEND_PID" ] && "$REPO/tests/backend/stop.sh" "$BACKEND_PID" >/dev/null 2>&1 || true
}
trap cleanup EXIT

BACKEND_PID=$(BACKEND_PORT=$BACKEND_PORT BACKEND_TOKEN=$TOKEN BACKEND_DIR=$BASE/backend \
	BACKEND_HEALTH_PORT=$BACKEND_HEALTH OTELCOL=$COL "$REPO/tests/backend/run.sh")
/usr/bin/prometheus-node-exporter --web.listen-address=127.0.0.1:$NODE_PORT >"$BASE/node_exporter.log" 2>&1 &
PIDS+=($!)
"$REPO/build/standins/dcgm-standin" -port "$DCGM_PORT" >"$BASE/dcgm.log" 2>&1 &
PIDS+=($!)
sleep 1

cat >"$BASE/site.yaml" <<EOF
otel:
  endpoint: http://127.0.0.1:$BACKEND_PORT
  service_name: gym-node-bench
  token_env: OTEL_TOKEN
  binary: $COL
  node_metrics_port: $NODE_PORT
  gpu_metrics_port: $DCGM_PORT
EOF
chmod 0644 "$BASE/site.yaml"
JOBOUT=$BASE/job
mkdir -p "$JOBOUT"
chown "$USER_NAME:" "$JOBOUT"

# be_count: "requests bytes" the backend received so far (one jsonl line
# per request; metrics and traces files).
be_count() { cat "$BASE/backend/metrics.jsonl" "$BASE/backend/traces.jsonl" "$BASE/backend/logs.jsonl" 2>/dev/null | wc -lc | awk '{print $1, $2}'; }
# be_points: data points and spans in the backend's files so far.
be_points() {
	python3 - "$BASE/backend" <<'PY'
import json, os, sys
d = sys.argv[1]
pts = spans = 0
for name in ("metrics.jsonl", "traces.jsonl"):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        continue
    for line in open(p):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        for rm in o.get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    for k in ("gauge", "sum", "histogram", "summary", "exponentialHistogram"):
                        if k in m:
                            pts += len(m[k].get("dataPoints", []))
        for rs in o.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                spans += len(ss.get("spans", []))
print(pts, spans)
PY
}

# ticks PID: utime+stime of PID (clock ticks).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# mem PID: "VmRSS_KiB Pss_KiB".
mem() { echo "$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status") $(awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup")"; }
# cpu_over PID SECONDS: percent of one core PID used over the next SECONDS.
cpu_over() {
	local a b t0 t1
	a=$(ticks "$1"); t0=$(date +%s%N)
	sleep "$2"
	b=$(ticks "$1"); t1=$(date +%s%N)
	awk -v d=$((b - a)) -v hz="$HZ" -v ns=$((t1 - t0)) 'BEGIN {printf "%.2f", 100 * d / hz / (ns / 1e9)}'
}
# load_cpu PID PORT TOKEN SECONDS TAG: loadgen at RATE for SECONDS against
# 127.0.0.1:PORT; prints "cpu% achieved_rate ok_spans failed_spans".
load_cpu() {
	local pid=$1 port=$2 tok=$3 secs=$4 tag=$5 a b t0 t1
	OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$port OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer%20$tok" \
		"$LOADGEN" --steps "$RATE:${secs}s" --tag "$tag" --out "$BASE/$tag.json" --pause 0s --workers 4 --batch 200 >/dev/null 2>"$BASE/$tag.err" &
	local lg=$!
	sleep 2 # past loadgen's start
	a=$(ticks "$pid"); t0=$(date +%s%N)
	sleep $((secs - 4))
	b=$(ticks "$pid"); t1=$(date +%s%N)
	mem "$pid" >"$BASE/$tag.mem"
	wait "$lg" || true
	awk -v d=$((b - a)) -v hz="$HZ" -v ns=$((t1 - t0)) 'BEGIN {printf "%.2f ", 100 * d / hz / (ns / 1e9)}'
	jq -r '.[0] | [.achieved_rate, .ok_spans, .failed_spans] | map(tostring) | join(" ")' "$BASE/$tag.json" 2>/dev/null | head -1 || echo "? ? ?"
}

# ------------------------------------------------ the supervised collector
log "starting the supervisor (idle ${IDLE}s, then $RATE spans/s for ${LOAD}s)"
# The receiver token, minted here as root's prolog mints it and handed down
# the same way (the report carries none).
RTOK="gos_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
OTEL_TOKEN=$TOKEN GYM_OTEL_RECEIVER_TOKEN=$RTOK "$CLI" supervise --site "$BASE/site.yaml" --job-id 990001 --node bench \
	--output "$JOBOUT" --user "$USER_NAME" >"$BASE/report.json" 2>"$BASE/supervisor.err" &
SUP_PID=$!
for ((i = 0; i < 300; i++)); do grep -q '"status"' "$BASE/report.json" 2>/dev/null && break; sleep 0.1; done
jq -e '.status == "ready"' "$BASE/report.json" >/dev/null || die "supervisor: $(cat "$BASE/report.json" "$BASE/supervisor.err")"
CPID=$(jq -r .collector_pid "$BASE/report.json")
HTTP=$(jq -r .ports.otlp_http "$BASE/report.json")
log "collector pid $CPID, OTLP HTTP $HTTP; warming up 20 s"
sleep 20
read -r BE_R0 BE_B0 <<<"$(be_count)"
read -r BE_P0 _ <<<"$(be_points)"
IDLE_CPU=$(cpu_over "$CPID" "$IDLE")
read -r BE_R1 BE_B1 <<<"$(be_count)"
read -r BE_P1 _ <<<"$(be_points)"
SUP_IDLE=$(awk -v d="$(ticks "$SUP_PID")" -v hz="$HZ" -v s="$((IDLE + 20))" 'BEGIN {printf "%.2f", 100 * d / hz / s}')
read -r IDLE_RSS IDLE_PSS <<<"$(mem "$CPID")"
log "idle: $IDLE_CPU % of a core"
read -r LOAD_CPU LOAD_RATE LOAD_OK LOAD_FAIL <<<"$(load_cpu "$CPID" "$HTTP" "$RTOK" "$LOAD" sup-load)"
read -r LOAD_RSS LOAD_PSS <<<"$(cat "$BASE/sup-load.mem")"
sleep 3
read -r BE_R2 BE_B2 <<<"$(be_count)"
read -r _ BE_S2 <<<"$(be_points)"
log "load: $LOAD_CPU % of a core at $LOAD_RATE spans/s"
cp "$JOBOUT/collector.yaml" "$BASE/rendered.yaml"
kill -TERM "$SUP_PID"
wait "$SUP_PID" || true
SUP_PID=""
TRACES_LINES=$(wc -l <"$JOBOUT/traces.jsonl" 2>/dev/null || echo 0)

{
	echo "# bench-scale node: one collector, default scrape targets (node_exporter, dcgm stand-in) every 15 s"
	echo
	echo "| figure | value |"
	echo "|---|---|"
	echo "| collector CPU idle, ${IDLE} s (% of one core) | $IDLE_CPU |"
	echo "| supervisor CPU over its life until the load (% of one core) | $SUP_IDLE |"
	echo "| collector CPU at $RATE spans/s, $((LOAD - 4)) s window (% of one core) | $LOAD_CPU (loadgen achieved $LOAD_RATE/s, ok $LOAD_OK, refused $LOAD_FAIL) |"
	echo "| the same per 10,000 spans/s, idle subtracted | $(awk -v l="$LOAD_CPU" -v i="$IDLE_CPU" -v r="$LOAD_RATE" 'BEGIN {if (r+0 > 0) printf "%.2f", (l - i) * 10000 / r; else print "?"}') |"
	echo "| to the backend, idle: requests/min, KiB/min (OTLP-JSON as the backend wrote it), data points/min | $(awk -v r=$((BE_R1 - BE_R0)) -v b=$((BE_B1 - BE_B0)) -v p=$((BE_P1 - BE_P0)) -v s="$IDLE" 'BEGIN {printf "%.1f, %.0f, %.0f", r*60/s, b/1024*60/s, p*60/s}') |"
	echo "| to the backend during the load step ($LOAD s): requests, spans per request | $((BE_R2 - BE_R1)), $(awk -v r=$((BE_R2 - BE_R1)) -v s="$BE_S2" 'BEGIN {if (r>0) printf "%.0f", s/r; else print "?"}') (all requests, spans over all of them) |"
	echo "| collector memory idle: VmRSS / PSS (MiB) | $((IDLE_RSS / 1024)) / $((IDLE_PSS / 1024)) |"
	echo "| collector memory under load: VmRSS / PSS (MiB) | $((LOAD_RSS / 1024)) / $((LOAD_PSS / 1024)) |"
	echo
} | tee "$OUT/result.txt"

[ "$VARIANTS" = 1 ] || { echo "bench-scale node took $(($(date +%s) - T0)) s" | tee -a "$OUT/result.txt"; exit 0; }

# ------------------------------------------------ what dominates
# variant NAME YQ-LIKE-EDIT: the rendered configuration with one part taken
# out (python3 rewrites the YAML's pipelines), run directly on fresh ports.
variant_conf() {
	python3 - "$BASE/rendered.yaml" "$1" "$2" <<'EOF'
import re, sys
src, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(src).read()
# fresh ports: +1000 on every 127.0.0.1 listener of the rendered config
text = re.sub(r'127\.0\.0\.1:(\d+)', lambda m: '127.0.0.1:%d' % (int(m.group(1)) + 1000), text)
text = re.sub(r'(port: )(\d+)', lambda m: m.group(1) + str(int(m.group(2)) + 1000), text)
text = text.replace(sys.argv[1].rsplit('/', 1)[0] + '/job/', sys.argv[1].rsplit('/', 1)[0] + '/var-' + name + '/')
def drop_line(t, line):
    return '\n'.join(l for l in t.split('\n') if l.strip() != line)
if name == 'no-scrape':
    text = drop_line(text, '- prometheus')
elif name == 'no-spanmetrics':
    text = drop_line(text, '- span_metrics')
elif name == 'no-files':
    for s in ('file/traces', 'file/metrics', 'file/logs'):
        text = drop_line(text, '- ' + s)
elif name == 'no-backend':
    text = drop_line(text, '- otlp_http/backend')
elif name == 'gzip-level-1':
    if 'compression_params' not in text:
        text = text.replace('  otlp_http/backend:\n', '  otlp_http/backend:\n    compression_params:\n      level: 1\n', 1)
elif name == 'gzip-default-level':
    text = re.sub(r'    compression_params:\n      level: \d+\n', '', text)
elif name == 'scrape-proto':
    text = text.replace('          metrics_path: /metrics\n', '          metrics_path: /metrics\n          scrape_protocols: [PrometheusProto, OpenMetricsText1.0.0, PrometheusText0.0.4]\n')
elif name == 'gogc-200':
    pass  # the environment differs, not the configuration
elif name == 'no-transform':
    for s in ('transform/names', 'filter/stale'):
        text = drop_line(text, '- ' + s)
open(out, 'w').write(text)
EOF
}
{
	echo "## what dominates: the rendered configuration with one part out, run directly (no supervisor polling its metrics)"
	echo
	echo "| configuration | CPU idle, 60 s (% of a core) | CPU at $RATE spans/s, 26 s (% of a core) | achieved spans/s |"
	echo "|---|---|---|---|"
} | tee -a "$OUT/result.txt"
for v in ${GOS_SCALE_VARIANTS:-as-rendered no-scrape no-spanmetrics no-files no-backend no-transform gzip-default-level}; do
	mkdir -p "$BASE/var-$v"
	chown "$USER_NAME:" "$BASE/var-$v"
	variant_conf "$v" "$BASE/var-$v.yaml"
	chmod 0644 "$BASE/var-$v.yaml"
	vtok=vtok-$v
	setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups env -i PATH=/usr/bin:/bin \
		OTEL_TOKEN=$TOKEN GYM_OTEL_RECEIVER_TOKEN=$vtok GOMEMLIMIT=409MiB GOGC=$([ "$v" = gogc-200 ] && echo 200 || echo 100) \
		"$COL" --config "$BASE/var-$v.yaml" >"$BASE/var-$v.log" 2>&1 &
	vp=$!
	PIDS+=($vp)
	vhttp=$((HTTP + 1000))
	for ((i = 0; i < 100; i++)); do (exec 3<>"/dev/tcp/127.0.0.1/$vhttp") 2>/dev/null && break; sleep 0.1; done
	sleep 10
	vidle=$(cpu_over "$vp" 60)
	read -r vload vrate _ _ <<<"$(load_cpu "$vp" "$vhttp" "$vtok" 30 "var-$v-load")"
	kill -TERM "$vp"
	wait "$vp" 2>/dev/null || true
	echo "| $v | $vidle | $vload | $vrate |" | tee -a "$OUT/result.txt"
done
echo | tee -a "$OUT/result.txt"
echo "bench-scale node took $(($(date +%s) - T0)) s" | tee -a "$OUT/result.txt"
