/*
 * stepstart.h: the step-only design's start, wait and drain (stepstart.c;
 * gym_otel_step.so only).
 */
#ifndef GYM_OTEL_STEPSTART_H
#define GYM_OTEL_STEPSTART_H

#include <stdint.h>
#include <stddef.h>

#include <slurm/spank.h>

#include "args.h"
#include "record.h"

/* A step of a job that asked, on a node with no record (init_post_opt,
 * root): starts the supervisor's start unless another step did, without
 * waiting. Returns a read-only descriptor of the job's ready file, or -1
 * (the job did not ask, or the start could not begin: logged). */
int gos_stepstart_begin(spank_t sp, const struct gos_args *a, const char *node, uint32_t job_id);
/* In a task: waits (5 ms polls, at most timeout_s seconds) until the ready
 * file holds root's record, and parses it into r. 0, or -1 (timeout or out
 * of memory; message in err). */
int gos_stepstart_wait(int fd, int timeout_s, struct gos_record *r, char *err, size_t errlen);
/* The extern step's exit: the core's epilog where root's record dir
 * exists, then the ready and lock files go. */
void gos_stepstart_drain(spank_t sp, const struct gos_args *a, const char *node, uint32_t job_id);

#endif
