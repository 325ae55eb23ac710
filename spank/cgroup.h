/*
 * cgroup.h: the collector's cgroup follows the job's (cgroup.c).
 */
#ifndef GYM_OTEL_CGROUP_H
#define GYM_OTEL_CGROUP_H

#include <stdint.h>
#include <slurm/spank.h>

struct gos_record;

/* Lowers the record's memory bound to the job's memory on the node
 * (S_JOB_ALLOC_MEM); the outcome is logged. */
void gos_cgroup_bound_memory(spank_t sp, const struct gos_record *r, uint32_t job_id);
/* Widens cpuset (the collector cgroup's cpuset.cpus) by this process's
 * CPU affinity, the step's CPUs; logged on failure, never fails. */
void gos_cgroup_follow_cpus(const char *cpuset, uint32_t job_id);

#endif
