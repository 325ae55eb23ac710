/*
 * prolog.c: job_prolog and job_epilog, as root in a fresh
 * `slurmstepd spank prolog|epilog` process (slurm_spank_init is not called
 * there: the plugstack arguments are parsed again here).
 *
 * The Go core is loaded only for a job that carries encoded settings
 * (prolog) or has a record dir on this node (epilog). Both always return 0
 * to Slurm. With collector_wait=step the prolog hands the core's prolog to
 * a child and returns at once (handoff.c); the epilog waits for that
 * child first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "clock.h"
#include "core.h"
#include "gym_otel_contract.h"
#include "handoff.h"
#include "log.h"
#include "node.h"
#include "prolog.h"

/* The forwarded job-control variables as the prolog sees them. */
static const char *job_control(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* Run the core with no signal blocked, so the supervisor it starts inherits
 * an empty mask (22.05's slurmstepd blocks SIGTERM, among others). */
static void unblock_all(sigset_t *old)
{
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, old);
}

int gos_job_prolog(spank_t sp, int ac, char **av)
{
	struct gos_args a = { 0 };
	struct gos_core core;
	const char *encoded, *token;
	uint32_t job_id = 0;
	uid_t uid;
	gid_t gid;
	sigset_t old;
	char started[24], ppid[24], node[256];
	int held = -1, starter = 0;

	encoded = job_control("SPANK_" GOS_JOB_CONTROL_SPEC);
	if (!encoded)
		return 0; /* not a gym-otel job: Go is never loaded */
	/* The prolog's start, handed on to the supervisor (its phase spans). */
	snprintf(started, sizeof(started), "%lld", gos_now_ms());
	setenv(GOS_ENV_PROLOG_START, started, 1);
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS) {
		gos_error("job prolog: cannot read the job's id, uid or gid: collector off");
		return 0;
	}
	if (gos_args_parse(&a, ac, av)) {
		gos_error("%s (the collector is off for job %u)", a.err, job_id);
		goto out;
	}
	token = job_control("SPANK_" GOS_JOB_CONTROL_TOKEN);
	gos_debug("job %u: prolog: the job carries a spec", job_id);
	/* The slurmd that runs this prolog, for the supervisor's anchor (the
	 * core's parent is not slurmd when a child runs it). */
	snprintf(ppid, sizeof(ppid), "%ld", (long)getppid());
	setenv(GOS_ENV_SLURMD_PID, ppid, 1);
	if (a.wait_step) {
		int rc = -1;

		if (gos_node_name(sp, node, sizeof(node)) == 0)
			rc = gos_handoff_fork(&a, node, job_id, &held);
		if (rc == 1) {
			/* the starter runs it; the steps wait */
			gos_debug("job %u: prolog: the collector's start goes on in a child (collector_wait=step)", job_id);
			goto out;
		}
		if (rc == 0) {
			/* The starter. The core's prolog keeps its own deadline
			 * (at most prolog_timeout); no Slurm bound is left on this
			 * child, so SIGALRM's default action ends it should that
			 * ever fail. */
			starter = 1;
			signal(SIGALRM, SIG_DFL);
			alarm(a.prolog_timeout + 15);
		} else {
			gos_error("job %u: collector_wait=step: the prolog starts the collector itself", job_id);
		}
	}
	unblock_all(&old);
	if (gos_core_open(&a, &core) == 0)
		core.prolog(a.joined, encoded, token ? token : "", job_id, uid, gid);
	if (starter)
		_exit(0); /* the kernel frees the start lock */
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (held >= 0)
		close(held);
out:
	gos_args_free(&a);
	return 0;
}

int gos_job_epilog(spank_t sp, int ac, char **av)
{
	struct gos_args a = { 0 };
	struct gos_core core;
	struct stat st;
	char node[256], dir[4400], started[24];
	uint32_t job_id = 0;
	sigset_t old;
	long long waited = 0;

	snprintf(started, sizeof(started), "%lld", gos_now_ms());
	if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS)
		return 0;
	if (gos_args_parse(&a, ac, av)) {
		/* Still find and stop what a good configuration started. */
		gos_error("%s (job %u epilog: using the default record_dir)", a.err, job_id);
		free(a.record_dir);
		a.record_dir = strdup(GOS_DEFAULT_RECORD_DIR);
		if (!a.record_dir)
			goto out;
	}
	if (gos_node_name(sp, node, sizeof(node)))
		goto out;
	/* A start handed to a child (collector_wait=step) ends before the
	 * epilog looks: its record is then ready or failed. The child is
	 * bounded by prolog_timeout; past that and a margin, the epilog goes
	 * on (it ends a starting record's collector). */
	if (gos_handoff_wait(a.record_dir, node, job_id, a.prolog_timeout + 10, &waited) < 0)
		gos_error("job %u: the collector's start still runs after %lld ms: the epilog goes on", job_id, waited);
	else if (waited > 0)
		gos_debug("job %u: epilog: waited %lld ms for the collector's start", job_id, waited);
	snprintf(dir, sizeof(dir), "%s/%s/%u", a.record_dir, node, job_id);
	if (lstat(dir, &st) == 0) {
		gos_debug("job %u: epilog: record dir %s", job_id, dir);
		/* The epilog's start, told to the supervisor (its phase spans). */
		setenv(GOS_ENV_EPILOG_START, started, 1);
		unblock_all(&old);
		if (gos_core_open(&a, &core) == 0)
			core.epilog(a.joined ? a.joined : "", a.record_dir, node, job_id);
		sigprocmask(SIG_SETMASK, &old, NULL);
	} /* else no record: nothing to do, Go is never loaded */
	gos_handoff_remove(a.record_dir, node, job_id);
out:
	gos_args_free(&a);
	return 0;
}
