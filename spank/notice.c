/*
 * notice.c: what a step tells about the job's collector on its node, pure
 * C: slurmd's log from the step's init_post_opt, the user's terminal (one
 * task's stderr) from task_init. step.c decides which; the words are here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
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

/* s as one shell word into buf (single quotes when it needs them). */
static void shell_word(const char *s, char *buf, size_t len)
{
	size_t w = 0;

	if (s[strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		     "0123456789_./,:=@%+-")] == 0) {
		snprintf(buf, len, "%s", s);
		return;
	}
	if (len < 3) {
		buf[0] = 0;
		return;
	}
	buf[w++] = '\'';
	for (; *s && w + 6 < len; s++) {
		if (*s == '\'') {
			memcpy(buf + w, "'\\''", 4); /* close, an escaped ', reopen */
			w += 4;
		} else {
			buf[w++] = *s;
		}
	}
	buf[w++] = '\'';
	buf[w] = 0;
}

/* Whether s is printable text, one line (no control byte). */
static int one_line(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/*
 * The batch step tells the job's output, once, where the job's telemetry
 * is, where the collector ships it and the one command that reads it:
 *
 *   gym-otel: job 1234's telemetry: files under /runs/r1/otel (nodes gn[1-2]), shipped to https://otlp.example.com:4318
 *   gym-otel: read it: gym-otel-spank inspect /runs/r1/otel (complete once the job has ended)
 *
 * Why slurm_spank_task_init, in the task's forked child: it is the one
 * callback of the remote context that runs after slurmstepd has made fds
 * 0-2 the task's own (the batch step's: the job's output and error files,
 * as sbatch -o/-e name them) and before execve(2). In 22.05, 24.11 and
 * 26.05 alike (src/slurmd/slurmstepd/mgr.c _fork_all_tasks: become the
 * user, io_dup_stdio, then exec_task in task.c: setup_env, then
 * spank_user_task = task_init, then execve), so the lines come first in
 * the job's output, written as the user. task_init_privileged runs before
 * stdio is set up (its stderr is slurmstepd's), init_post_opt and
 * user_init in slurmstepd itself, whose slurm_info reaches only the
 * node's log. The batch step runs once per job (once per array element,
 * which is a job of its own), on one node, with one task: srun steps and
 * the other nodes never print it. The job's node list is the batch task's
 * SLURM_JOB_NODELIST, in the task env by then (setup_env). Nothing here
 * comes from the user's settings but the dir's name and the endpoint,
 * which root's record holds without credentials (helper/record.Backend);
 * no token or header value is ever in the record.
 */
void gos_notice_task_telemetry(spank_t sp, uint32_t job_id, const char *output_dir,
			       const char *backend)
{
	char nodes[1024], word[8300], line[12000], job[96];
	char aj[32], at[32];
	uint32_t rank = 1;
	const char *p;
	ssize_t n;
	int len;

	if (spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) != ESPANK_SUCCESS || rank != 0)
		return;
	if (!output_dir[0] || !one_line(output_dir) || !one_line(backend))
		return;
	if (spank_getenv(sp, "SLURM_JOB_NODELIST", nodes, sizeof(nodes)) != ESPANK_SUCCESS ||
	    !nodes[0] || !one_line(nodes))
		nodes[0] = 0;
	if (spank_getenv(sp, "SLURM_ARRAY_JOB_ID", aj, sizeof(aj)) == ESPANK_SUCCESS &&
	    spank_getenv(sp, "SLURM_ARRAY_TASK_ID", at, sizeof(at)) == ESPANK_SUCCESS &&
	    aj[0] && at[0] && one_line(aj) && one_line(at))
		snprintf(job, sizeof(job), "job %u (%s_%s)", job_id, aj, at);
	else
		snprintf(job, sizeof(job), "job %u", job_id);
	shell_word(output_dir, word, sizeof(word));
	len = snprintf(line, sizeof(line),
		       GOS_PREFIX "%s's telemetry: files under %s%s%s%s, %s%s\n"
		       GOS_PREFIX "read it: gym-otel-spank inspect %s (complete once the job has ended)\n",
		       job, output_dir,
		       nodes[0] ? (strpbrk(nodes, "[,") ? " (nodes " : " (node ") : "",
		       nodes, nodes[0] ? ")" : "",
		       backend[0] ? "shipped to " : "not shipped (no backend)",
		       backend, word);
	if (len <= 0 || (size_t)len >= sizeof(line))
		return;
	/* One write where it can (a pipe or a file: the two lines stay together). */
	for (p = line; len > 0; p += n, len -= n) {
		n = write(STDERR_FILENO, p, len);
		if (n < 0 && errno == EINTR) {
			n = 0;
			continue;
		}
		if (n <= 0)
			return;
	}
}

void gos_notice_task_failed(uint32_t job_id, const char *node, const char *reason)
{
	slurm_error(GOS_PREFIX "job %u: the collector on %s failed to start "
		    "(on_failure=fail): %s", job_id, node, reason);
}
