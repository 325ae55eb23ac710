#!/usr/bin/env bash
# Smoke test of the harness itself: up, jobs as the test user on every node,
# nodes usable afterwards, down, nothing left running.
#
#   tests/slurm/selftest.sh [up.sh options...]    e.g. --prolog-flags Contain
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/slurm/lib.sh
. "$HERE/lib.sh"
need_root

step() { log "selftest: $*"; }
fail() { log "selftest FAILED: $*"; dump_logs; exit 1; }

step "up.sh $*"
"$HERE/up.sh" "$@" >/dev/null
# shellcheck source=/dev/null
. "$STATE/env.sh"
read -r -a NODE_ARR <<<"$GOS_SLURM_NODES"
N=${#NODE_ARR[@]}
U=$GOS_SLURM_USER
as_user() { (cd "$GOS_SLURM_JOBS" && timeout 120 su "$U" -s /bin/bash -c "$1"); }

step "srun -N$N hostname"
out=$(as_user "srun -N$N hostname") || fail "srun"
[ "$(printf '%s\n' "$out" | grep -c .)" -eq "$N" ] || fail "srun printed: $out"

step "sbatch --wait -N$N"
script="$GOS_SLURM_JOBS/selftest.$$.sh"
res="$GOS_SLURM_JOBS/selftest.$$.out"
cat >"$script" <<EOF
#!/bin/bash
srun -l printenv SLURMD_NODENAME
EOF
chmod 0644 "$script"
as_user "sbatch --wait -N$N -o $res $script" >/dev/null || fail "sbatch --wait"
for n in $GOS_SLURM_NODES; do
	grep -q ": $n\$" "$res" || fail "no step output from $n in $res: $(cat "$res")"
done
rm -f "$script" "$res"

step "salloc -N1 srun true"
as_user "salloc -N1 srun true" >/dev/null 2>&1 || fail "salloc"

step "nodes usable again"
for ((i = 0; i < 100; i++)); do
	st=$(sinfo -h -N -o '%T' | sort -u | tr '\n' ' ')
	[ "$st" = "idle " ] && break
	sleep 0.1
done
[ "$st" = "idle " ] || fail "node states after jobs: $st"

step "down.sh"
"$HERE/down.sh"
left=$(pgrep -a -f '^(slurmctld|slurmd|slurmstepd|munged)' || true)
[ -z "$left" ] || fail "still running after down.sh: $left"
step "OK"
