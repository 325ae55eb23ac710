/*
 * handoff.h: collector_wait=step, the prolog's start handed to a child and
 * the steps' and the epilog's wait for it (handoff.c).
 */
#ifndef GYM_OTEL_HANDOFF_H
#define GYM_OTEL_HANDOFF_H

#include <stdint.h>

#include "args.h"

/* The job's start lock's path, <record_dir>/<node>/.start-<job>.lock, into
 * buf: 0, or -1 (a node name that is not one path element, or too long). */
int gos_start_lock_path(const char *record_dir, const char *node, uint32_t job_id, char *buf, size_t len);
/*
 * The job prolog (root): makes and locks the job's start lock and forks
 * the starter, a child in a session of its own that holds the lock.
 * Returns 0 in the starter (which runs the core's prolog and _exits), 1 in
 * the prolog once the starter runs (the prolog returns), -1 when the
 * handoff could not begin (logged): then *held is the locked lock's
 * descriptor, which the prolog keeps while it starts the collector itself,
 * or -1 when there is no lock.
 */
int gos_handoff_fork(const struct gos_args *a, const char *node, uint32_t job_id, int *held);
/*
 * A step or the epilog (root): where the job's start lock exists, waits
 * until no start holds it (2 ms polls, at most timeout_s seconds). 0: no
 * start lock; 1: waited until it was free; -1: still held at timeout_s.
 * *waited_ms is the wait.
 */
int gos_handoff_wait(const char *record_dir, const char *node, uint32_t job_id, int timeout_s, long long *waited_ms);
/* The epilog, after the core's: removes the job's start lock if free. */
void gos_handoff_remove(const char *record_dir, const char *node, uint32_t job_id);

#endif
