/*
 * phase.c: the step's phase facts for the supervisor's spans (issue 28),
 * pure C in slurmstepd, never in a forked task.
 *
 * At the step's start (init_post_opt) and end (slurm_spank_exit) the step
 * tells the job's supervisor on the node, on its hold socket (the path
 * from root's record, helper/supervise/holdsock.go), one line:
 *
 *   step start <step id> <unix ms>
 *   step end <step id> <start ms> <end ms> <tasks end ms|0> <final wait end ms|0> <exit|-1> <signal|0> <tasks>
 *
 * and reads its short answer, "ok", through holdsock.c's
 * gos_hold_exchange: the socket is trusted only when it is root's in a
 * dir only root can write, and each exchange is bounded by GOS_HOLD_MS
 * and GOS_HOLD_MAX bytes; a supervisor that does not answer costs the
 * step at most that, twice, and loses only the span. The task exits
 * (task_exit, in slurmstepd) give the worst exit code or the first signal
 * of the node's tasks, and the batch script's end; the final wait's end
 * is taken when the batch step's task_exit returns.
 *
 * The answer to the start may carry the trace context the step's tasks
 * run in, "ok <traceparent>" (its slurm.step span; for the batch step the
 * slurm.batch_script span, which wraps the script's process), which the
 * step hands to its tasks as TRACEPARENT (taskenv.c). The supervisor
 * answers it rather than this side deriving it: the span ids are SHA-256
 * hashes over facts only the supervisor holds together (the run's cluster,
 * restart count and SLUID, the node, the step's start), and one
 * derivation cannot drift from a second one. No answer within the
 * exchange's bound, or one that is not a valid traceparent: no
 * TRACEPARENT, and the step goes on.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <slurm/slurm.h>

#include "clock.h"
#include "holdsock.h"
#include "log.h"
#include "phase.h"
#include "record.h"

static struct {
	int on;
	uint32_t step_id;
	char sock[GOS_HOLD_PATH_MAX + 1];
	long long start, tasks_end, final_end;
	int exit, signal, tasks;
	int waits; /* the last task exited (no signal): the final wait may run */
} ph;

/* Sends line to the supervisor and waits (bounded) for its answer: 0 when
 * it answered "ok". */
static int tell(const char *line)
{
	char buf[GOS_HOLD_MAX + 1];

	return gos_hold_exchange(ph.sock, line, buf) > 0 && !strcmp(buf, "ok\n") ? 0 : -1;
}

/* Whether s is a traceparent of version 00 (W3C trace-context): lower-case
 * hex, a trace id and a span id not all zeros. */
static int valid_traceparent(const char *s)
{
	int trace = 0, span = 0;

	if (strlen(s) != GOS_TRACEPARENT_LEN || strncmp(s, "00-", 3))
		return 0;
	for (int i = 3; i < GOS_TRACEPARENT_LEN; i++) {
		char c = s[i];

		if (i == 35 || i == 52) {
			if (c != '-')
				return 0;
			continue;
		}
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
		if (c != '0' && i < 35)
			trace = 1;
		if (c != '0' && i > 35 && i < 52)
			span = 1;
	}
	return trace && span;
}

void gos_phase_step_start(spank_t sp, uint32_t job_id, uint32_t step_id, const struct gos_record *r,
			  char traceparent[GOS_TRACEPARENT_LEN + 1])
{
	char line[96], buf[GOS_HOLD_MAX + 1];
	size_t n;

	(void)sp;
	memset(&ph, 0, sizeof(ph));
	traceparent[0] = 0;
	if (!r->ready || !r->hold_socket[0])
		return;
	ph.on = 1;
	ph.step_id = step_id;
	ph.exit = -1;
	snprintf(ph.sock, sizeof(ph.sock), "%s", r->hold_socket);
	ph.start = gos_now_ms();
	snprintf(line, sizeof(line), "step start %u %lld\n", step_id, ph.start);
	if (gos_hold_exchange(ph.sock, line, buf) <= 0 || strncmp(buf, "ok", 2)) {
		gos_debug("job %u step %u: the supervisor did not take the step's start", job_id, step_id);
		return;
	}
	n = strlen(buf);
	if (n == 3 + GOS_TRACEPARENT_LEN + 1 && buf[2] == ' ' && buf[n - 1] == '\n') {
		buf[n - 1] = 0;
		if (valid_traceparent(buf + 3))
			memcpy(traceparent, buf + 3, GOS_TRACEPARENT_LEN + 1);
	}
	if (!traceparent[0] && strcmp(buf, "ok\n"))
		gos_debug("job %u step %u: the supervisor's trace context is not a traceparent", job_id, step_id);
}

void gos_phase_task_exit(spank_t sp)
{
	int status;

	if (!ph.on || spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
		return;
	ph.tasks++;
	ph.tasks_end = gos_now_ms();
	ph.waits = WIFEXITED(status); /* the batch step's final wait follows an exit, never a kill */
	if (WIFSIGNALED(status)) {
		if (!ph.signal)
			ph.signal = WTERMSIG(status);
	} else if (WIFEXITED(status) && WEXITSTATUS(status) > ph.exit) {
		ph.exit = WEXITSTATUS(status);
	}
}

void gos_phase_task_exit_done(void)
{
	if (ph.on && ph.step_id == SLURM_BATCH_SCRIPT && ph.tasks_end && ph.waits)
		ph.final_end = gos_now_ms();
}

void gos_phase_step_end(void)
{
	char line[192];

	if (!ph.on)
		return;
	snprintf(line, sizeof(line), "step end %u %lld %lld %lld %lld %d %d %d\n", ph.step_id, ph.start,
		 gos_now_ms(), ph.tasks_end, ph.final_end, ph.exit, ph.signal, ph.tasks);
	if (tell(line))
		gos_debug("step %u: the supervisor did not take the step's end", ph.step_id);
	memset(&ph, 0, sizeof(ph));
}
