/*
 * phase.c: the step's phase facts for the supervisor's spans (issue 28),
 * pure C in slurmstepd, never in a forked task.
 *
 * At the step's start (init_post_opt) and end (slurm_spank_exit) the step
 * tells the job's supervisor on the node, on its control socket (the path
 * from root's record, helper/supervise/controlsock.go), one line:
 *
 *   step start <step id> <unix ms>
 *   step end <step id> <start ms> <end ms> <tasks end ms|0> <final wait end ms|0> <exit|-1> <signal|0> <tasks>
 *
 * and reads its short answer, "ok", through controlsock.c
 * (gos_control_step_start, gos_control_step_end: the words are helper/contract's
 * GOS_HOLD_STEP_START and GOS_HOLD_STEP_END): the socket is trusted only
 * when it is root's in a dir only root can write, and each exchange is
 * bounded by GOS_HOLD_EXCHANGE_MS and GOS_HOLD_ANSWER_MAX bytes; a
 * supervisor that does not answer costs the step at most that, twice, and
 * loses only the span. The task exits
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
 * exchange's bound, or one that is not a valid traceparent (controlsock.c
 * checks it): no TRACEPARENT, and the step goes on.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <slurm/slurm.h>

#include "clock.h"
#include "controlsock.h"
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

void gos_phase_step_start(spank_t sp, uint32_t job_id, uint32_t step_id, const struct gos_record *r,
			  char traceparent[GOS_TRACEPARENT_LEN + 1])
{
	int rc;

	(void)sp;
	memset(&ph, 0, sizeof(ph));
	traceparent[0] = 0;
	if (!r->ready || !r->control_socket[0])
		return;
	ph.on = 1;
	ph.step_id = step_id;
	ph.exit = -1;
	snprintf(ph.sock, sizeof(ph.sock), "%s", r->control_socket);
	ph.start = gos_now_ms();
	rc = gos_control_step_start(ph.sock, step_id, ph.start, traceparent);
	if (rc < 0)
		gos_debug("job %u step %u: the supervisor did not take the step's start", job_id, step_id);
	else if (rc > 0)
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
	struct gos_control_step_end e;

	if (!ph.on)
		return;
	e = (struct gos_control_step_end){ .step_id = ph.step_id, .start_ms = ph.start, .end_ms = gos_now_ms(),
					.tasks_end_ms = ph.tasks_end, .final_end_ms = ph.final_end,
					.exit = ph.exit, .signal = ph.signal, .tasks = ph.tasks };
	if (gos_control_step_end(ph.sock, &e))
		gos_debug("step %u: the supervisor did not take the step's end", ph.step_id);
	memset(&ph, 0, sizeof(ph));
}
