#!/usr/bin/env bash
# Switch a running test cluster to another slurm.conf variant and restart
# slurmctld and both slurmds (PrologFlags needs a restart).
#   tests/slurm-docker/variant.sh SUITE none|alloc|contain|contain_spank|runinjob
set -euo pipefail
. "$(dirname "$0")/lib.sh"
write_conf "${2:?variant}"
restart_slurm
log "variant ${2}"
