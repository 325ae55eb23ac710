/*
 * stepstart.c: the step-only design (gym_otel_step.so, built with
 * -DGOS_STEP_ONLY): no job prolog or epilog callback, so slurmd starts no
 * `slurmstepd spank prolog|epilog` for the jobs that do not ask. A
 * prototype; docs/performance.md gives its costs and what it loses.
 *
 *   the first step on a node (init_post_opt, slurmstepd, root, before any
 *     fork of a task): under a lock on <record_dir>/<node>/.start-<job>.lock,
 *     make the root-owned ready file <record_dir>/<node>/.start-<job>.ready
 *     and start a detached process (its own session) that loads the Go core
 *     and runs the prolog's start, as the job prolog would; it does not
 *     wait. A later step finds the ready file and does not start another.
 *     Each such step keeps a read-only descriptor of the ready file.
 *   the starter, once the core's prolog returned (the supervisor reported
 *     ready or failed, root's record written): copies root's record into
 *     the ready file, then an end line.
 *   each task (task_init, C, as the user, in the step's cgroup): reads the
 *     ready file through that descriptor until its end line, bounded by
 *     prolog_timeout, and takes the record from it.
 *   the extern step's exit (PrologFlags=Contain): where root's record
 *     exists, a child runs the core's epilog (drain, record removed), and
 *     the two files go.
 *
 * Go never runs in a slurmstepd: the starter and the drain are forked
 * children that load the core after the fork.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "clock.h"
#include "core.h"
#include "gym_otel_contract.h"
#include "handoff.h"
#include "log.h"
#include "node.h"
#include "record.h"
#include "stepstart.h"

#define READY_END "#gym-otel-ready-end\n"
#define READY_MAX (256 << 10)

/* The job's variables the core's prolog reads (helper/callbacks), copied
 * from the step's environment into the starter's. */
static const char *const job_vars[] = {
	"SLURM_CLUSTER_NAME", "SLURM_JOB_USER", "SLURM_JOB_NODELIST", "SLURM_NODELIST",
	"SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
	"SLURM_JOB_RESTART_COUNT", "SLURM_JOB_END_TIME", "SLURM_CONF", "SLURM_JOB_PARTITION",
	"SLURM_JOB_ACCOUNT", "SLURM_JOB_EXIT_CODE", "SLURM_JOB_DERIVED_EC", NULL,
};

/* Every descriptor above 2 closes at an exec (the supervisor the core
 * starts inherits none of slurmstepd's). */
static void cloexec_all(void)
{
	for (int fd = 3; fd < 4096; fd++) {
		int fl = fcntl(fd, F_GETFD);

		if (fl >= 0 && !(fl & FD_CLOEXEC))
			fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
	}
}

struct start_in {
	char *encoded, *token;
	uint32_t job_id;
	uid_t uid;
	gid_t gid;
	char *vals[sizeof(job_vars) / sizeof(job_vars[0])];
};

static char *step_env(spank_t sp, const char *name)
{
	char buf[8192];

	if (spank_getenv(sp, name, buf, sizeof(buf)) != ESPANK_SUCCESS)
		return NULL;
	return strdup(buf);
}

/* The starter: runs the core's prolog, then fills the ready file. Never
 * returns. */
static void starter(const struct gos_args *a, const struct start_in *in, const char *node, int ready)
{
	struct gos_core core;
	struct gos_record r;
	char started[24], err[512], path[4400];
	sigset_t none;
	int rc = 1, fd;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int i = 0; job_vars[i]; i++) {
		if (in->vals[i])
			setenv(job_vars[i], in->vals[i], 1);
	}
	setenv("SLURMD_NODENAME", node, 1);
	snprintf(started, sizeof(started), "%lld", gos_now_ms());
	setenv(GOS_ENV_PROLOG_START, started, 1);
	if (gos_core_open(a, &core) == 0)
		rc = core.prolog(a->joined, in->encoded, in->token ? in->token : "", in->job_id,
				 in->uid, in->gid);
	gos_debug("job %u: step-started prolog returned %d", in->job_id, rc);
	/* root's record as the prolog wrote it, or a failed one */
	snprintf(path, sizeof(path), "%s/%s/%u/" GOS_RECORD_FILE, a->record_dir, node, in->job_id);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 && gos_record_read(a->record_dir, node, in->job_id, &r, err, sizeof(err)) == 0) {
		char buf[65536];
		ssize_t n;
		off_t off = 0;

		gos_record_free(&r);
		while ((n = read(fd, buf, sizeof(buf))) > 0) {
			if (pwrite(ready, buf, n, off) != n)
				break;
			off += n;
		}
		if (pwrite(ready, "\n" READY_END, sizeof(READY_END), off) < 0)
			gos_error("job %u: writing the ready file: %s", in->job_id, strerror(errno));
	} else {
		char buf[1200];
		int n = snprintf(buf, sizeof(buf), GOS_RECORD_STATUS "=failed\n" GOS_RECORD_REASON
				 "=the job's collector on %s did not start (see slurmd's log)\n" READY_END, node);

		if (pwrite(ready, buf, n, 0) < 0)
			gos_error("job %u: writing the ready file: %s", in->job_id, strerror(errno));
	}
	_exit(0);
}

int gos_stepstart_begin(spank_t sp, const struct gos_args *a, const char *node, uint32_t job_id)
{
	char dir[4300], lock[4400], ready[4400], spec[65536];
	struct start_in in = { 0 };
	int lfd, wfd = -1, rfd = -1;
	pid_t pid;

	if (spank_getenv(sp, "SLURM_SPANK_" GOS_JOB_CONTROL_SPEC, spec, sizeof(spec)) != ESPANK_SUCCESS || !spec[0])
		return -1; /* the job did not ask */
	if (gos_node_record_dir(a->record_dir, node, dir, sizeof(dir))) {
		gos_error("job %u: record dir %s/%s unusable: collector off", job_id, a->record_dir, node);
		return -1;
	}
	snprintf(lock, sizeof(lock), "%s/" GOS_START_LOCK_PREFIX "%u" GOS_START_LOCK_SUFFIX, dir, job_id);
	snprintf(ready, sizeof(ready), "%s/.start-%u.ready", dir, job_id);
	lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX)) {
		gos_error("job %u: %s: %s", job_id, lock, strerror(errno));
		if (lfd >= 0)
			close(lfd);
		return -1;
	}
	rfd = open(ready, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (rfd >= 0) {
		/* Another step started it (or is starting it). */
		close(lfd);
		return rfd;
	}
	wfd = open(ready, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (wfd < 0) {
		gos_error("job %u: %s: %s", job_id, ready, strerror(errno));
		close(lfd);
		return -1;
	}
	rfd = open(ready, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	in.encoded = spec;
	in.token = step_env(sp, "SLURM_SPANK_" GOS_JOB_CONTROL_TOKEN);
	in.job_id = job_id;
	if (spank_get_item(sp, S_JOB_UID, &in.uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &in.gid) != ESPANK_SUCCESS)
		in.uid = 0;
	for (int i = 0; job_vars[i]; i++)
		in.vals[i] = step_env(sp, job_vars[i]);
	if (in.uid == 0) {
		gos_error("job %u: cannot read the job's uid or gid: collector off", job_id);
		pid = -1;
	} else {
		pid = fork();
	}
	if (pid == 0) {
		/* detached: its own session, reparented at once */
		setsid();
		if (fork() == 0) {
			cloexec_all();
			starter(a, &in, node, wfd);
		}
		_exit(0);
	}
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	else {
		const char *f = GOS_RECORD_STATUS "=failed\n" GOS_RECORD_REASON "=could not start the job's collector\n" READY_END;

		if (write(wfd, f, strlen(f)) < 0)
			gos_error("job %u: writing the ready file: %s", job_id, strerror(errno));
	}
	gos_debug("job %u: step started the supervisor's start (starter %d)", job_id, (int)pid);
	close(wfd);
	close(lfd);
	if (in.token) {
		memset(in.token, 0, strlen(in.token));
		free(in.token);
	}
	for (int i = 0; job_vars[i]; i++)
		free(in.vals[i]);
	return rfd;
}

int gos_stepstart_wait(int fd, int timeout_s, struct gos_record *r, char *err, size_t errlen)
{
	long long deadline = gos_mono_ms() + 1000LL * timeout_s;
	struct timespec pause = { 0, 5 * 1000 * 1000 }; /* 5 ms */
	static char buf[READY_MAX + 1];
	size_t endlen = strlen(READY_END);

	for (;;) {
		ssize_t n = pread(fd, buf, READY_MAX, 0);

		if (n >= (ssize_t)endlen && !memcmp(buf + n - endlen, READY_END, endlen)) {
			buf[n - endlen] = 0;
			memset(r, 0, sizeof(*r));
			return gos_record_parse(buf, r, err, errlen);
		}
		if (gos_mono_ms() >= deadline) {
			snprintf(err, errlen, "the job's collector was not ready within %d s", timeout_s);
			return -1;
		}
		nanosleep(&pause, NULL);
	}
}

void gos_stepstart_drain(spank_t sp, const struct gos_args *a, const char *node, uint32_t job_id)
{
	char dir[4400], started[24], path[4400];
	struct stat st;
	pid_t pid;

	if (strchr(node, '/'))
		return;
	snprintf(dir, sizeof(dir), "%s/%s/%u", a->record_dir, node, job_id);
	if (lstat(dir, &st) == 0) {
		char *vals[sizeof(job_vars) / sizeof(job_vars[0])] = { 0 };

		for (int i = 0; job_vars[i]; i++)
			vals[i] = step_env(sp, job_vars[i]);
		snprintf(started, sizeof(started), "%lld", gos_now_ms());
		pid = fork();
		if (pid == 0) {
			struct gos_core core;
			sigset_t none;

			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, NULL);
			cloexec_all();
			for (int i = 0; job_vars[i]; i++)
				if (vals[i])
					setenv(job_vars[i], vals[i], 1);
			setenv("SLURMD_NODENAME", node, 1);
			setenv(GOS_ENV_EPILOG_START, started, 1);
			if (gos_core_open(a, &core) == 0)
				core.epilog(a->joined ? a->joined : "", a->record_dir, node, job_id);
			_exit(0);
		}
		if (pid > 0)
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
		for (int i = 0; job_vars[i]; i++)
			free(vals[i]);
	}
	snprintf(path, sizeof(path), "%s/%s/.start-%u.ready", a->record_dir, node, job_id);
	unlink(path);
	if (gos_start_lock_path(a->record_dir, node, job_id, path, sizeof(path)) == 0)
		unlink(path);
}
