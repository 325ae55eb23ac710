/*
 * notice.c: what a step tells about the job's collector on its node, pure
 * C: slurmd's log from the step's init_post_opt, the user's terminal (one
 * task's stderr) from task_init. step.c decides which; the words are here.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"
#include "notice.h"

void gos_notice_no_record(uint32_t job_id, const char *node)
{
	gos_error("job %u: the job asked for a collector but node %s has "
		  "no record of it: the job prolog did not start one here "
		  "(PrologFlags=Alloc missing in slurm.conf, slurmd not "
		  "restarted after installing the plugin, or the prolog "
		  "failed: see slurmd's log)", job_id, node);
}

void gos_notice_kept(uint32_t job_id, uint32_t step_id, const char *kept)
{
	gos_info("job %u step %u: %s already set, kept over the collector's values",
		 job_id, step_id, kept);
}

/* Warn once per job and node (a marker created O_EXCL in the record dir). */
int gos_notice_off_once(const char *dir, uint32_t job_id, const char *node, const char *reason)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/warned", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return 0;
	close(fd);
	gos_error("job %u: no collector on %s, the job runs without telemetry "
		  "(on_failure=continue): %s", job_id, node, reason);
	return 1;
}

/*
 * The job asked for a collector but this node's prolog started none: tell
 * the user on the first local task's stderr of each step (the reason is in
 * slurmd's log).
 */
void gos_notice_task_no_record(spank_t sp, const char *node)
{
	uint32_t rank = 1;

	if (spank_get_item(sp, S_TASK_ID, &rank) == ESPANK_SUCCESS && rank == 0)
		dprintf(STDERR_FILENO, GOS_PREFIX "warning: the job asked for a collector "
			"but node %s has none, this step runs without telemetry "
			"(the cause is in slurmd's log on %s)\n", node, node);
}

/*
 * The step carries its own OTel settings beside the collector's, as the
 * driver's srun line of a Gym that still renders its own collector step
 * does: say so once per step, on task 0's stderr.
 */
void gos_notice_task_kept(spank_t sp, uint32_t job_id, const char *kept)
{
	uint32_t rank = 1;

	if (spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) == ESPANK_SUCCESS && rank == 0)
		dprintf(STDERR_FILENO, GOS_PREFIX "warning: job %u: %s already set for this "
			"step, kept, so they win over this job's collector (a Gym that "
			"still renders its own collector step sets them on the driver's "
			"srun line: drop them when the script carries --gym-otel)\n",
			job_id, kept);
}

/*
 * on_failure=continue: the user learns it once per job, on the first
 * task's stderr (the forked task: plain C, write(2) only).
 */
void gos_notice_task_off(spank_t sp, const char *node, const char *reason)
{
	uint32_t rank = 1;

	if (spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) == ESPANK_SUCCESS && rank == 0)
		dprintf(STDERR_FILENO, GOS_PREFIX "warning: no collector on %s, this job runs "
			"without telemetry (on_failure=continue): %s\n", node, reason);
}

void gos_notice_task_failed(uint32_t job_id, const char *node, const char *reason)
{
	slurm_error(GOS_PREFIX "job %u: the collector on %s failed to start "
		    "(on_failure=fail): %s", job_id, node, reason);
}
