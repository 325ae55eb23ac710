/*
 * controlsock.h: the steps' one client of the job's supervisor on its control
 * socket (controlsock.c, pure C): the batch step's question and final-scrape
 * request, and every step's start and end (phase.c). The words and bounds
 * are helper/contract's (GOS_HOLD_* in gym_otel_contract.h).
 */
#ifndef GYM_OTEL_CONTROLSOCK_H
#define GYM_OTEL_CONTROLSOCK_H

#include <stdint.h>
#include <sys/types.h>

#include "gym_otel_contract.h"

/* One exchange with the job's supervisor on the control socket at path (from
 * root's record): sends line (at most GOS_HOLD_REQUEST_MAX bytes, ended
 * by "\n"), reads the whole answer into buf (NUL-ended). The socket must
 * be a socket owned by root in a directory owned by root that neither
 * group nor others can write (only root can have bound it: the prolog's
 * listener, which the supervisor serves). Returns the answer's length, or
 * -1: no such socket, a line too long, no listener, no complete answer
 * within GOS_HOLD_EXCHANGE_MS, or GOS_HOLD_ANSWER_MAX bytes or more. */
ssize_t gos_control_exchange(const char *path, const char *line, char buf[GOS_HOLD_ANSWER_MAX + 1]);

/* Asks the job's supervisor GOS_HOLD_QUESTION: 1 when it says every
 * scrape target of the job has a sample stamped at or after since_ms
 * (unix ms), 2 when it says there is no scrape target, else 0 (no answer,
 * not yet). */
int gos_hold_sampled(const char *path, long long since_ms);

/* Tells the job's supervisor (GOS_HOLD_FINAL) that the batch script of a
 * job on nodes nodes has ended, so that it scrapes every target now (and
 * has the other nodes' supervisors do so): 1 when it answered "ok", else
 * 0. */
int gos_hold_final(const char *path, int nodes);

/* Tells the job's supervisor that step step_id started at start_ms (unix
 * ms; GOS_HOLD_STEP_START). traceparent gets the trace context the
 * supervisor answered for the step's tasks, or "". Returns 0 when the
 * supervisor took the line (with or without a traceparent), 1 when it
 * took it with an answer that is not a valid traceparent, -1 when it did
 * not take it (no answer in time, or another answer). */
int gos_control_step_start(const char *path, uint32_t step_id, long long start_ms,
			char traceparent[GOS_TRACEPARENT_LEN + 1]);

/* A step's end (GOS_HOLD_STEP_END): unix ms, 0 where not known. */
struct gos_control_step_end {
	uint32_t step_id;
	long long start_ms, end_ms;
	long long tasks_end_ms; /* the last task's exit, or 0 */
	long long final_end_ms; /* the batch step's final wait's end, or 0 */
	int exit; /* the worst exit code of the node's tasks, or -1 */
	int signal; /* the first signal that ended one, or 0 */
	int tasks; /* the node's tasks that exited */
};

/* Tells the job's supervisor a step's end e: 0 when it answered "ok",
 * else -1. */
int gos_control_step_end(const char *path, const struct gos_control_step_end *e);

#endif
