#!/usr/bin/env bash
# Run the docker-cluster suite on each Debian suite given (default: all three):
# bring the cluster up (up.sh SUITE alloc), run the Go tests of this
# directory against it (the main job, then the other slurm.conf variants,
# then the faults), tear it down. Prints the time of each part.
#
#   tests/slurm-docker/test.sh [bookworm] [trixie] [sid]
#
# GYM_OTEL_DOCKER_RUN='-run TestMainJob' narrows the tests; GYM_OTEL_KEEP=1
# leaves the last cluster up for a look (tear down with down.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH=/usr/local/go/bin:$PATH
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie sid)

current=
cleanup() { [ -n "$current" ] && [ "${GYM_OTEL_KEEP:-0}" != 1 ] && "$here/down.sh" "$current"; return 0; }
trap cleanup EXIT

rc=0
summary=()
for s in "${suites[@]}"; do
	current=$s
	t0=$(date +%s)
	if ! "$here/up.sh" "$s" alloc >/dev/null; then
		rc=1
		summary+=("slurm-docker[$s]: FAILED to come up after $(($(date +%s) - t0))s")
		"$here/down.sh" "$s" || true
		current=
		continue
	fi
	t1=$(date +%s)
	# shellcheck disable=SC2086
	if ! (cd "$repo" && GYM_OTEL_DOCKER_TESTS=1 GYM_OTEL_REQUIRE_REAL=1 GOS_SUITE=$s \
		go test -count=1 -v -timeout 20m ${GYM_OTEL_DOCKER_RUN:-} ./tests/slurm-docker/); then
		rc=1
		echo "slurm-docker[$s]: FAILED; logs in $(. "$here/lib.sh" "$s"; echo "$work")/log" >&2
	fi
	t2=$(date +%s)
	if [ "${GYM_OTEL_KEEP:-0}" != 1 ] || [ "$s" != "${suites[-1]}" ]; then
		"$here/down.sh" "$s"
		current=
	fi
	t3=$(date +%s)
	summary+=("slurm-docker[$s]: up $((t1 - t0))s (image build included when not cached), tests $((t2 - t1))s, down $((t3 - t2))s")
done
printf '%s\n' "${summary[@]}" >&2
exit $rc
