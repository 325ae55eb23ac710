#!/bin/sh
# Stop a backend started by run.sh: SIGTERM, then wait (default 10 s, env
# BACKEND_STOP_SECONDS) until the process is gone or a zombie. Exit 0 when it
# stopped, 1 when it had to be SIGKILLed.
set -eu
pid=${1:?usage: stop.sh PID}
wait_s=${BACKEND_STOP_SECONDS:-10}

running() {
    st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    case "$st" in Z*) return 1 ;; esac
    return 0
}

running "$pid" || exit 0
kill -TERM "$pid" 2>/dev/null || exit 0
deadline=$(( $(date +%s) + wait_s ))
while running "$pid"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "backend: pid $pid still running after ${wait_s}s, sending SIGKILL" >&2
        kill -KILL "$pid" 2>/dev/null || true
        exit 1
    fi
    sleep 0.02
done
