/*
 * phase.c: the step's phase facts for the supervisor's spans (issue 28),
 * pure C in slurmstepd, never in a forked task.
 *
 * At the step's start (init_post_opt) and end (slurm_spank_exit) the step
 * tells the job's supervisor on the node, on its hold socket (the abstract
 * name from root's record, helper/supervise/holdsock.go), one line:
 *
 *   step start <step id> <unix ms>
 *   step end <step id> <start ms> <end ms> <tasks end ms|0> <final wait end ms|0> <exit|-1> <signal|0> <tasks>
 *
 * and reads its short answer. The listener is trusted only when
 * SO_PEERCRED names the record's supervisor (pid and the job's uid), as
 * for the hold. Each exchange is bounded by GOS_PHASE_MS; a supervisor
 * that does not answer costs the step at most that, twice, and loses only
 * the span. The task exits (task_exit, in slurmstepd) give the worst exit
 * code or the first signal of the node's tasks, and the batch script's end;
 * the final wait's end is taken when the batch step's task_exit returns.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "clock.h"
#include "log.h"
#include "phase.h"
#include "record.h"

#define GOS_PHASE_MS 250

static struct {
	int on;
	uint32_t step_id;
	uid_t uid;
	pid_t sup_pid;
	char sock[64];
	long long start, tasks_end, final_end;
	int exit, signal, tasks;
	int waits; /* the last task exited (no signal): the final wait may run */
} ph;

static long long mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sends line to the supervisor and waits (bounded) for its answer: 0 when
 * it answered "ok". */
static int tell(const char *line)
{
	struct sockaddr_un a;
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	size_t nl = strlen(ph.sock), ll = strlen(line);
	long long end = mono() + GOS_PHASE_MS;
	char buf[64];
	ssize_t got = 0, n;
	int fd, rc = -1;

	if (nl == 0 || nl + 1 > sizeof(a.sun_path) || ph.sup_pid <= 1)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	memcpy(a.sun_path + 1, ph.sock, nl); /* abstract: a leading NUL */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + 1 + nl))
		goto out;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.pid != ph.sup_pid || cr.uid != ph.uid)
		goto out;
	if (send(fd, line, ll, MSG_NOSIGNAL) != (ssize_t)ll)
		goto out;
	while (got < (ssize_t)sizeof(buf) - 1) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = end - mono();

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			goto out;
		n = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			break;
		got += n;
	}
	buf[got] = 0;
	rc = strcmp(buf, "ok\n") ? -1 : 0;
out:
	close(fd);
	return rc;
}

void gos_phase_step_start(spank_t sp, uint32_t job_id, uint32_t step_id, const struct gos_record *r)
{
	char line[96];

	memset(&ph, 0, sizeof(ph));
	if (!r->ready || !r->hold_socket[0] || r->supervisor_pid <= 1 ||
	    spank_get_item(sp, S_JOB_UID, &ph.uid) != ESPANK_SUCCESS)
		return;
	ph.on = 1;
	ph.step_id = step_id;
	ph.sup_pid = (pid_t)r->supervisor_pid;
	ph.exit = -1;
	snprintf(ph.sock, sizeof(ph.sock), "%s", r->hold_socket);
	ph.start = gos_now_ms();
	snprintf(line, sizeof(line), "step start %u %lld\n", step_id, ph.start);
	if (tell(line))
		gos_debug("job %u step %u: the supervisor did not take the step's start", job_id, step_id);
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
