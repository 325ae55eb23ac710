/*
 * handoff.c: collector_wait=step, the collector's start overlapped with
 * Slurm's launch of the job's steps (gym_otel.so).
 *
 *   the job prolog (root, `slurmstepd spank prolog`, one thread, before
 *     the core is loaded): makes the job's start lock <record_dir>/<node>/.start-<job>.lock
 *     (root's, 0600), takes an exclusive flock on it and forks a child in a
 *     session of its own that holds the lock, loads the Go core and runs
 *     the prolog's start as the prolog itself would (ports, packet filter,
 *     supervisor, root's record, the proof, the ready record); the prolog
 *     returns once the child is forked. The child ends when the core's
 *     prolog returns (bounded by its deadline, prolog_timeout; and by an
 *     alarm at prolog_timeout + 15 s, prolog.c): the kernel releases the
 *     lock then, whatever the child's end.
 *   each step but the extern one (init_post_opt, slurmstepd, root, before
 *     any task is forked): where root's record is missing or says
 *     starting and the job's start lock exists, waits until the lock is
 *     free (2 ms polls, bounded by prolog_timeout), then reads root's
 *     record as it would have after a waiting prolog.
 *   the job epilog: waits for the lock the same way before it looks for
 *     the job's record dir, and removes the lock file after the core's
 *     epilog.
 *
 * Why the steps and not the tasks wait: the step's root-side work (the
 * collector's memory bound, the phase span, the task env) needs the ready
 * record, and the task's fork is a small part of the launch. Why not the
 * extern step: slurmd waits for the extern step's start before it
 * launches the batch step; it applies the CPU set and memory bound only
 * when the record is ready already (the batch step and every srun step
 * apply them too).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "gym_otel_contract.h"
#include "handoff.h"
#include "log.h"
#include "node.h"

int gos_start_lock_path(const char *record_dir, const char *node, uint32_t job_id, char *buf, size_t len)
{
	if (!gos_node_name_safe(node))
		return -1;
	return (size_t)snprintf(buf, len, "%s/%s/" GOS_START_LOCK_PREFIX "%u" GOS_START_LOCK_SUFFIX,
				record_dir, node, job_id) >= len ? -1 : 0;
}

/* A lock file root may trust: a regular file of root's, one link. */
static int trusted(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 && st.st_nlink == 1 &&
	       !(st.st_mode & (S_IWGRP | S_IWOTH));
}

/* 1 when this process has one thread (/proc/self/status): a child of its
 * fork may load the Go core, no lock of another thread held there. */
static int single_threaded(void)
{
	char line[256];
	int n = 0;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n == 1;
}

int gos_handoff_fork(const struct gos_args *a, const char *node, uint32_t job_id, int *held)
{
	char dir[4300], path[4400];
	int status = 0, lfd;
	pid_t pid;

	*held = -1;
	if (!single_threaded()) {
		gos_error("job %u: the prolog's process has more than one thread: no handoff", job_id);
		return -1;
	}
	if (gos_node_record_dir(a->record_dir, node, dir, sizeof(dir)) ||
	    gos_start_lock_path(a->record_dir, node, job_id, path, sizeof(path))) {
		gos_error("job %u: record dir %s/%s unusable for the start's handoff", job_id, a->record_dir, node);
		return -1;
	}
	lfd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0) {
		gos_error("job %u: the start lock %s: %s", job_id, path, strerror(errno));
		return -1;
	}
	if (!trusted(lfd)) {
		gos_error("job %u: the start lock %s is not root's own file: not used", job_id, path);
		close(lfd);
		return -1;
	}
	if (flock(lfd, LOCK_EX | LOCK_NB)) {
		gos_error("job %u: the start lock %s: %s", job_id, path,
			  errno == EWOULDBLOCK ? "held by another start of the job" : strerror(errno));
		close(lfd);
		return -1;
	}
	*held = lfd;
	pid = fork();
	if (pid < 0) {
		gos_error("job %u: fork for the start's handoff: %s", job_id, strerror(errno));
		return -1; /* the caller starts it itself, holding the lock */
	}
	if (pid == 0) {
		pid_t starter;

		/* its own session: nothing of slurmd's signals to the prolog's
		 * process group reaches it */
		setsid();
		starter = fork();
		if (starter == 0)
			return 0;
		_exit(starter < 0 ? 1 : 0);
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		gos_error("job %u: the start's handoff did not fork its child", job_id);
		return -1;
	}
	/* The child holds the lock (the same open file); the prolog's copy
	 * goes. */
	close(lfd);
	*held = -1;
	return 1;
}

/* Polls for a shared lock on fd until no start holds it or timeout_s
 * passed: 0 free, -1 still held. */
static int await_free(int fd, int timeout_s)
{
	long long deadline = gos_mono_ms() + 1000LL * timeout_s;
	struct timespec pause = { 0, 2 * 1000 * 1000 }; /* 2 ms */

	for (;;) {
		if (flock(fd, LOCK_SH | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return 0; /* not a lock anyone holds */
		if (gos_mono_ms() >= deadline)
			return -1;
		nanosleep(&pause, NULL);
	}
}

int gos_handoff_wait(const char *record_dir, const char *node, uint32_t job_id, int timeout_s, long long *waited_ms)
{
	char path[4400];
	long long t0 = gos_mono_ms();
	int fd, rc;

	*waited_ms = 0;
	if (gos_start_lock_path(record_dir, node, job_id, path, sizeof(path)))
		return 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return 0;
	if (!trusted(fd)) {
		close(fd);
		return 0;
	}
	rc = await_free(fd, timeout_s);
	close(fd);
	*waited_ms = gos_mono_ms() - t0;
	return rc ? -1 : 1;
}

void gos_handoff_remove(const char *record_dir, const char *node, uint32_t job_id)
{
	char path[4400];
	int fd;

	if (gos_start_lock_path(record_dir, node, job_id, path, sizeof(path)))
		return;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return;
	/* only a free lock goes: a start still under way keeps it */
	if (trusted(fd) && flock(fd, LOCK_EX | LOCK_NB) == 0)
		unlink(path);
	close(fd);
}
