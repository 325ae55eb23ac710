/*
 * step.c: every step of a job (remote context, slurmstepd), pure C: no Go
 * ever runs in a step process. Acts on root's record only, never on the
 * option, and never blocks long. The step's state and its decisions are
 * here; each concern is in its own file:
 *
 *   init_post_opt (slurmstepd parent): find the node (node.c) and read
 *     root's record (record.c), after the collector's start where the
 *     prolog handed it to a child (collector_wait=step, handoff.c); tell
 *     the supervisor the step's start and get the span its tasks run in
 *     (phase.c); set the task env from
 *     the record and that span, TRACEPARENT (taskenv.c), and
 *     bound the collector's memory (cgroup.c); say what is missing
 *     (notice.c)
 *   task_init (forked task child): the batch step names where the job's
 *     telemetry is and how to read it (job_output=on); tell the user what
 *     is missing, or fail the tasks when the collector failed and
 *     on_failure=fail (fails the job, never drains the node) (notice.c)
 *   task_post_fork: the collector's CPU set follows the step's (cgroup.c)
 *   task_exit: each task's exit status, for the step's end (phase.c);
 *     in the batch step, the final-scrape wait (hold.c), and its end
 *     (phase.c)
 *   exit (slurm_spank_exit): tell the supervisor the step's end (phase.c)
 *
 * In gym_otel_step.so (-DGOS_STEP_ONLY, a prototype) the job has no
 * prolog or epilog: the first step's init_post_opt on a node starts the
 * collector, the steps' tasks wait for its record (task_init), and the
 * extern step's exit drains it (stepstart.c).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "args.h"
#include "cgroup.h"
#include "gym_otel_contract.h"
#include "handoff.h"
#include "hold.h"
#include "log.h"
#include "node.h"
#include "notice.h"
#include "phase.h"
#include "record.h"
#include "step.h"
#include "stepstart.h"
#include "taskenv.h"

static struct {
	int have; /* a record was read */
	int ready;
	int fail;
	int final_wait;
	int warn_user; /* this step made the job's warned marker: tell the user */
	int norecord;  /* the job asked, but this node has no record of it */
	uint32_t job_id;
	uint32_t step_id;
	char node[256];
	char reason[1024];
	char cpuset[4096]; /* the collector cgroup's cpuset.cpus, from the record */
	int cpuset_done;
	char kept[512]; /* telemetry variables set before the plugin, kept */
	char control_socket[GOS_HOLD_PATH_MAX + 1]; /* the supervisor's control socket (hold.c), or "" */
	/* The batch step with job_output=on: the telemetry line's facts, from
	 * root's record (notice.c); output_dir "" for every other step. */
	char output_dir[4096];
	char backend[2048];
	/* gym_otel_step.so (stepstart.c): the collector's start is under
	 * way; the tasks wait on the ready file (pending_fd, root's). */
	int pending;
	int pending_fd;
	int pending_timeout;
	int is_extern;
	char args_record_dir[4096];
} st;

int gos_step_init_post_opt(spank_t sp, struct gos_args *a)
{
	struct gos_record r;
	char err[512], jobbuf[16], tp[GOS_TRACEPARENT_LEN + 1];
	int rc;

	memset(&st, 0, sizeof(st));
	if (a->record_dir)
		snprintf(st.args_record_dir, sizeof(st.args_record_dir), "%s", a->record_dir);
	if (spank_get_item(sp, S_JOB_ID, &st.job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &st.step_id) != ESPANK_SUCCESS)
		return 0;
	if (st.step_id == SLURM_EXTERN_CONT) {
		st.is_extern = 1;
		/* The CPU set (the extern step's are the job's on the node) and
		 * the memory bound, nothing else. */
		if (!gos_record_node(a->record_dir, st.job_id, st.node, sizeof(st.node)) ||
		    !gos_node_name(sp, st.node, sizeof(st.node))) {
			struct gos_record r;
			char tp[GOS_TRACEPARENT_LEN + 1];

			if (gos_record_read(a->record_dir, st.node, st.job_id, &r, err, sizeof(err)) == 0) {
				if (r.ready) {
					snprintf(st.cpuset, sizeof(st.cpuset), "%s", r.cgroup_cpuset);
					gos_cgroup_bound_memory(sp, &r, st.job_id);
					if (gos_supervisor_alive(&r))
						gos_phase_step_start(sp, st.job_id, st.step_id, &r, tp);
				}
				gos_record_free(&r);
			}
		}
		return 0;
	}
	if (gos_record_node(a->record_dir, st.job_id, st.node, sizeof(st.node)) &&
	    gos_node_name(sp, st.node, sizeof(st.node))) {
		gos_debug("job %u: no SLURMD_NODENAME in the step", st.job_id);
		return 0;
	}
	rc = gos_record_read(a->record_dir, st.node, st.job_id, &r, err, sizeof(err));
	if ((rc == 1 && a->wait_step) || (rc == 0 && r.starting)) {
		/* collector_wait=step: the prolog handed the start to a child;
		 * wait for it here, before any task (handoff.c). */
		long long waited = 0;
		int w = gos_handoff_wait(a->record_dir, st.node, st.job_id, a->prolog_timeout + 5, &waited);

		if (w != 0) {
			if (rc == 0)
				gos_record_free(&r);
			if (w < 0)
				gos_error("job %u: step %u waited %lld ms for the collector's start on %s, which still runs: the step goes on without it",
					  st.job_id, st.step_id, waited, st.node);
			else
				gos_debug("job %u: step %u waited %lld ms for the collector's start", st.job_id, st.step_id, waited);
			rc = gos_record_read(a->record_dir, st.node, st.job_id, &r, err, sizeof(err));
		}
	}
	if (rc == 1) {
#ifdef GOS_STEP_ONLY
		/* The first step of a job that asked starts its collector; the
		 * tasks wait for it (task_init). */
		int fd = gos_stepstart_begin(sp, a, st.node, st.job_id);

		if (fd >= 0) {
			st.pending = 1;
			st.pending_fd = fd;
			st.pending_timeout = a->prolog_timeout;
			snprintf(jobbuf, sizeof(jobbuf), "%u", st.job_id);
			spank_setenv(sp, GOS_ENV_IN_JOB, jobbuf, 1);
			spank_unsetenv(sp, "SLURM_SPANK_" GOS_JOB_CONTROL_TOKEN);
			spank_unsetenv(sp, "SPANK_" GOS_JOB_CONTROL_TOKEN);
			return 0;
		}
#endif
		/* No collector for this job on this node. */
		gos_taskenv_strip(sp);
		if (spank_getenv(sp, "SLURM_SPANK_" GOS_JOB_CONTROL_SPEC, err, sizeof(err)) != ESPANK_ENV_NOEXIST) {
			st.norecord = 1;
			gos_notice_no_record(st.job_id, st.node);
		}
		return 0;
	}
	if (rc < 0) {
		gos_error("job %u: %s", st.job_id, err);
		return 0;
	}
	if (r.ready && !gos_supervisor_alive(&r)) {
		/*
		 * The supervisor has ended mid-job: it gave up on its collector
		 * (restarted too often, or its ports were taken by another
		 * process). Nothing answering on the recorded ports is the
		 * job's any more: this step gets no collector env, and values
		 * the plugin set in an earlier step (the batch script's) go.
		 */
		r.ready = 0;
		snprintf(r.reason, sizeof(r.reason), "the job's collector on %s stopped mid-job "
			 "(its supervisor, pid %ld, has ended: see supervisor.log in the job's "
			 "output dir)", st.node, r.supervisor_pid);
		gos_taskenv_strip(sp);
	}
	st.have = 1;
	st.ready = r.ready;
	st.fail = r.fail;
	st.final_wait = r.final_wait;
	snprintf(st.reason, sizeof(st.reason), "%s", r.reason);
	snprintf(st.control_socket, sizeof(st.control_socket), "%s", r.control_socket);
	gos_phase_step_start(sp, st.job_id, st.step_id, &r, tp);

	/* The nesting marker: an srun in this job does not submit again. */
	snprintf(jobbuf, sizeof(jobbuf), "%u", st.job_id);
	spank_setenv(sp, GOS_ENV_IN_JOB, jobbuf, 1);
	for (int i = 0; i < r.nunset; i++)
		spank_unsetenv(sp, r.unset[i]);
	if (r.ready && a->job_output && st.step_id == SLURM_BATCH_SCRIPT) {
		snprintf(st.output_dir, sizeof(st.output_dir), "%s", r.output_dir);
		snprintf(st.backend, sizeof(st.backend), "%s", r.backend);
	}
	if (r.ready) {
		snprintf(st.cpuset, sizeof(st.cpuset), "%s", r.cgroup_cpuset);
		gos_cgroup_bound_memory(sp, &r, st.job_id);
		gos_taskenv_apply(sp, &r, tp, st.job_id, st.kept, sizeof(st.kept));
		gos_taskenv_no_proxy(sp);
		if (st.kept[0])
			gos_notice_kept(st.job_id, st.step_id, st.kept);
	} else if (!r.fail) {
		st.warn_user = gos_notice_off_once(r.dir, st.job_id, st.node, r.reason);
	}
	gos_record_free(&r);
	return 0;
}

#ifdef GOS_STEP_ONLY
/* A task of a step that found the collector's start under way: waits for
 * root's record in the ready file, then sets the task env from it, or
 * applies on_failure. */
static int pending_task_init(spank_t sp)
{
	struct gos_record r;
	char err[512];

	if (gos_stepstart_wait(st.pending_fd, st.pending_timeout, &r, err, sizeof(err))) {
		gos_error("job %u: %s on %s", st.job_id, err, st.node);
		gos_notice_task_off(sp, st.node, err);
		return 0;
	}
	if (r.ready) {
		gos_taskenv_apply(sp, &r, "", st.job_id, st.kept, sizeof(st.kept));
		gos_taskenv_no_proxy(sp);
		for (int i = 0; i < r.nunset; i++)
			spank_unsetenv(sp, r.unset[i]);
		gos_record_free(&r);
		return 0;
	}
	if (r.fail) {
		gos_notice_task_failed(st.job_id, st.node, r.reason);
		gos_record_free(&r);
		return -1;
	}
	gos_notice_task_off(sp, st.node, r.reason);
	gos_record_free(&r);
	return 0;
}
#endif

int gos_step_task_init(spank_t sp)
{
#ifdef GOS_STEP_ONLY
	if (st.pending)
		return pending_task_init(sp);
#endif
	if (st.have && st.ready && st.output_dir[0])
		gos_notice_task_telemetry(sp, st.job_id, st.output_dir, st.backend);
	if (st.norecord) {
		gos_notice_task_no_record(sp, st.node);
		return 0;
	}
	if (st.have && st.ready && st.kept[0]) {
		gos_notice_task_kept(sp, st.job_id, st.kept);
		return 0;
	}
	if (!st.have || st.ready)
		return 0;
	if (!st.fail) {
		if (st.warn_user)
			gos_notice_task_off(sp, st.node, st.reason);
		return 0;
	}
	gos_notice_task_failed(st.job_id, st.node, st.reason);
	return -1;
}

/* Once per step, after its first task is forked (cgroup.c). */
int gos_step_task_post_fork(spank_t sp)
{
	(void)sp;
	if (st.cpuset_done || !st.cpuset[0])
		return 0;
	st.cpuset_done = 1;
	gos_cgroup_follow_cpus(st.cpuset, st.job_id);
	return 0;
}

int gos_step_task_exit(spank_t sp)
{
#ifdef GOS_STEP_ONLY
	if (st.pending && !st.have && st.step_id == SLURM_BATCH_SCRIPT) {
		/* The batch step started the collector: its final-scrape wait
		 * reads root's record now (slurmstepd, root). */
		struct gos_record r;
		char err[512];

		if (gos_record_read(st.args_record_dir, st.node, st.job_id, &r, err, sizeof(err)) == 0) {
			st.have = 1;
			st.ready = r.ready && gos_supervisor_alive(&r);
			st.final_wait = r.final_wait;
			snprintf(st.control_socket, sizeof(st.control_socket), "%s", r.control_socket);
			gos_record_free(&r);
		}
	}
#endif
	if (!st.have || !st.ready || st.step_id != SLURM_BATCH_SCRIPT || st.final_wait <= 0)
		return 0;
	gos_hold(sp, st.job_id, st.final_wait, st.node, st.control_socket);
	return 0;
}

void gos_step_exit(spank_t sp, const struct gos_args *a)
{
#ifdef GOS_STEP_ONLY
	if (st.pending)
		close(st.pending_fd);
	if (st.is_extern && a && a->record_dir && st.job_id) {
		if (!st.node[0])
			gos_node_name(sp, st.node, sizeof(st.node));
		if (st.node[0])
			gos_stepstart_drain(sp, a, st.node, st.job_id);
	}
#else
	(void)sp;
	(void)a;
#endif
	memset(&st, 0, sizeof(st));
}
