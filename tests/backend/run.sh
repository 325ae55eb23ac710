#!/bin/sh
# Start the test OTLP/HTTP backend (backend.yaml) in the background and wait
# until its health check answers. Prints the collector's pid on stdout.
#
#   BACKEND_PORT=14318 BACKEND_TOKEN=secret BACKEND_DIR=/tmp/be BACKEND_HEALTH_PORT=14133 \
#     tests/backend/run.sh
#
# Optional: OTELCOL (binary, default <repo>/build/otelcol-gym), BACKEND_CONFIG
# (default backend.yaml next to this script), BACKEND_WAIT_SECONDS (default 20).
# The collector's own log goes to $BACKEND_DIR/backend.log.
# Stop it with tests/backend/stop.sh <pid> (SIGTERM, then waits for the exit;
# the files are complete afterwards). The collector is reparented to PID 1 once
# this script exits, so after its exit it can linger as a zombie until PID 1
# reaps it: `kill -0 <pid>` is no exit test, stop.sh checks the process state.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
: "${BACKEND_PORT:?set BACKEND_PORT}"
: "${BACKEND_TOKEN:?set BACKEND_TOKEN}"
: "${BACKEND_DIR:?set BACKEND_DIR}"
: "${BACKEND_HEALTH_PORT:?set BACKEND_HEALTH_PORT}"
export BACKEND_PORT BACKEND_TOKEN BACKEND_DIR BACKEND_HEALTH_PORT
otelcol=${OTELCOL:-$repo/build/otelcol-gym}
config=${BACKEND_CONFIG:-$here/backend.yaml}
wait_s=${BACKEND_WAIT_SECONDS:-20}

mkdir -p "$BACKEND_DIR"
# Something already answering on the health port (a backend a killed test
# left behind) would pass the check below for a collector that cannot bind.
if curl -fsS -o /dev/null "http://127.0.0.1:$BACKEND_HEALTH_PORT/" 2>/dev/null; then
    echo "backend: 127.0.0.1:$BACKEND_HEALTH_PORT already answers: another backend is running" >&2
    exit 1
fi
"$otelcol" --config "$config" >"$BACKEND_DIR/backend.log" 2>&1 </dev/null &
pid=$!

deadline=$(( $(date +%s) + wait_s ))
while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "backend: collector exited during start-up; log:" >&2
        cat "$BACKEND_DIR/backend.log" >&2
        exit 1
    fi
    if curl -fsS -o /dev/null "http://127.0.0.1:$BACKEND_HEALTH_PORT/" 2>/dev/null; then
        break
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "backend: not healthy after ${wait_s}s; log:" >&2
        cat "$BACKEND_DIR/backend.log" >&2
        kill "$pid" 2>/dev/null || true
        exit 1
    fi
    sleep 0.05
done
echo "$pid"
