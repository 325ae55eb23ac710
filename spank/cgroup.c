/*
 * cgroup.c: the collector's cgroup on the node follows the job's, from the
 * steps (slurmstepd, as root; pure C): its memory bound comes down to the
 * job's memory (bound.c does the lowering), its CPU set widens to the
 * CPUs of the job's steps. The paths are root's, from root's record.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bound.h"
#include "cgroup.h"
#include "log.h"
#include "record.h"

/* Write v into the cgroup file path (root's, from root's record). */
static int write_cgroup(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, v, strlen(v));
	close(fd);
	return n == (ssize_t)strlen(v) ? 0 : -1;
}

/*
 * Bound the collector's cgroup by the job's memory on this node: the
 * prolog could only set the site's cap (Slurm tells a job's memory to its
 * steps, not to the job prolog). Lowers, never raises; a lowering the
 * kernel refuses is enforced, never ignored (bound.c), and the outcome is
 * logged. Runs in slurmstepd as root, before any task: the extern step's
 * (PrologFlags=Contain) is the first moment the job's memory is known.
 */
void gos_cgroup_bound_memory(spank_t sp, const struct gos_record *r, uint32_t job_id)
{
	char msg[1024];
	uint64_t mb = 0;
	int rc;

	if (!r->cgroup_memory[0] || spank_get_item(sp, S_JOB_ALLOC_MEM, &mb) != ESPANK_SUCCESS || mb == 0)
		return;
	rc = gos_bound_memory(r->cgroup_memory, (unsigned long long)mb << 20, msg, sizeof(msg));
	switch (rc) {
	case GOS_BOUND_KEPT:
		return;
	case GOS_BOUND_LOWERED:
		gos_debug("job %u: the collector's cgroup is bounded by the job's memory, %llu MiB",
			  job_id, (unsigned long long)mb);
		return;
	case GOS_BOUND_STEPPED:
		gos_info("job %u: the collector's cgroup is bounded by the job's memory, %llu MiB: %s",
			 job_id, (unsigned long long)mb, msg);
		return;
	default:
		gos_error("job %u: bounding the collector's cgroup by the job's memory (%llu MiB, %s): %s",
			  job_id, (unsigned long long)mb, r->cgroup_memory, msg);
	}
}

/* Parse a cpulist ("0-3,8,10-11") into set; 0, or -1. */
static int parse_cpulist(const char *s, cpu_set_t *set)
{
	CPU_ZERO(set);
	while (*s && *s != '\n') {
		char *end;
		unsigned long lo = strtoul(s, &end, 10), hi;

		if (end == s)
			return -1;
		hi = lo;
		if (*end == '-') {
			s = end + 1;
			hi = strtoul(s, &end, 10);
			if (end == s || hi < lo)
				return -1;
		}
		for (unsigned long c = lo; c <= hi && c < CPU_SETSIZE; c++)
			CPU_SET(c, set);
		s = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* Format set as a cpulist into buf. */
static void format_cpulist(const cpu_set_t *set, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = 0;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		int e = c;

		if (!CPU_ISSET(c, set))
			continue;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
			e++;
		used += snprintf(buf + used, len > used ? len - used : 0, "%s%d", used ? "," : "", c);
		if (e > c)
			used += snprintf(buf + used, len > used ? len - used : 0, "-%d", e);
		c = e;
	}
}

/*
 * The collector's CPU set follows the job's on this node: after the first
 * task of each step is forked, slurmstepd sits in the step's cgroup with
 * the step's CPUs (task/cgroup, ConstrainCores); the collector's cgroup
 * gets those CPUs, widened by every later step's (the union of the job's
 * steps, never beyond the job's CPUs). The extern step's CPUs, with
 * PrologFlags=Contain, are all of the job's. Where Slurm binds nothing the
 * affinity is every CPU and nothing changes. Plain C, as root; never fails.
 */
void gos_cgroup_follow_cpus(const char *cpuset, uint32_t job_id)
{
	cpu_set_t mine, cur, all;
	char buf[4096], out[4096];
	int fd, n;

	if (sched_getaffinity(0, sizeof(mine), &mine))
		return;
	CPU_ZERO(&all);
	for (long c = 0, on = sysconf(_SC_NPROCESSORS_CONF); c < on && c < CPU_SETSIZE; c++)
		CPU_SET(c, &all);
	CPU_AND(&mine, &mine, &all);
	if (CPU_EQUAL(&mine, &all) || CPU_COUNT(&mine) == 0)
		return; /* not bound by Slurm */
	fd = open(cpuset, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	if (parse_cpulist(buf, &cur))
		return;
	CPU_AND(&cur, &cur, &all);
	if (!CPU_EQUAL(&cur, &all))
		CPU_OR(&mine, &mine, &cur); /* an earlier step narrowed it: widen */
	if (CPU_EQUAL(&mine, &cur))
		return;
	format_cpulist(&mine, out, sizeof(out));
	if (write_cgroup(cpuset, out))
		gos_error("job %u: the collector's CPU set (%s to %s): %s", job_id, out, cpuset, strerror(errno));
	else
		gos_debug("job %u: the collector's CPUs are now %s", job_id, out);
}
