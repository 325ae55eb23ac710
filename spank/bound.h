/*
 * bound.h: lowering the collector cgroup's memory bound (bound.c, pure C).
 */
#ifndef GYM_OTEL_BOUND_H
#define GYM_OTEL_BOUND_H

#include <stddef.h>

/* Outcomes of gos_bound_memory. */
enum {
	GOS_BOUND_FAILED = -1, /* the bound could not be lowered (msg says why) */
	GOS_BOUND_KEPT = 0,    /* already at or below the job's memory */
	GOS_BOUND_LOWERED,     /* lowered at once */
	GOS_BOUND_STEPPED,     /* v1: lowered in steps after EBUSY, the kernel reclaimed */
	GOS_BOUND_KILLED,      /* v1: the group's processes killed, then lowered */
	GOS_BOUND_OOM,         /* v2: lowered; the kernel OOM-killed in the group */
};
int gos_bound_memory(const char *limit_file, unsigned long long want, char *msg, size_t len);

#endif
