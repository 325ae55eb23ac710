#!/usr/bin/env bash
# Tear the test cluster of one suite down (default: both): containers,
# network, and every process in them. Keeps the images (cached) and the work
# dir's files (jobs, logs) for a look afterwards; `down.sh SUITE --purge`
# removes those too.
set -uo pipefail
suites=${1:-all}
[ "$suites" = all ] && suites="bookworm trixie sid"
for s in $suites; do
	(
		. "$(dirname "$0")/lib.sh" "$s"
		compose down -v --remove-orphans -t 5 >/dev/null 2>&1
		# Anything left with the project's label (a compose file that changed).
		ids=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
		[ -n "$ids" ] && docker rm -f $ids >/dev/null
		docker network rm "${project}_net" >/dev/null 2>&1
		# The nodes' groups in the host's unified hierarchy (lib.sh): the
		# levels above the jobs', and a job's a killed node left.
		[ -n "${cgroup2:-}" ] && [ -d "$cgroup2" ] && find "$cgroup2" -depth -type d -exec rmdir {} + 2>/dev/null
		rm -f "$work/env"
		[ "${2:-}" = --purge ] && rm -rf "$work"
		true
	)
done
