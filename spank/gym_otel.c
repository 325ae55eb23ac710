/*
 * gym_otel.c: the SPANK entry points of gym_otel.so, the C front of the
 * gym-otel-spank plugin. Each entry point switches on the context and hands
 * off to one function per context; reading this file gives the lifecycle:
 *
 *   submit  (local: srun, allocator: sbatch/salloc; as the user)
 *           init: register --gym-otel, parse the     args.c
 *           plugstack arguments;
 *           init_post_opt: resolve + validate in     submit.c
 *           the Go core, forward GYM_OTEL_SPEC and
 *           GYM_OTEL_TOKEN
 *   prolog  (job_script: `slurmstepd spank prolog`, root)
 *           job_prolog: start the supervisor, write  prolog.c
 *           root's record; with collector_wait=step  handoff.c
 *           a child does it and the prolog returns
 *   step    (remote: slurmstepd; pure C, never Go)   step.c
 *           init_post_opt: with collector_wait=step, handoff.c
 *           wait for the collector's start;
 *           tell the supervisor the                  phase.c
 *           step's start, get its TRACEPARENT;
 *           task env from root's record;             taskenv.c
 *           task_init: the batch step names the job's notice.c
 *           files, backend and inspect command in
 *           the job's output; fail the tasks when
 *           the collector failed and on_failure=fail;
 *           task_post_fork: the collector's CPU set  cgroup.c
 *           follows the job's;
 *           task_exit: the tasks' exits;             phase.c
 *           final-scrape wait                        hold.c
 *           exit: tell the supervisor the step's     phase.c
 *           end
 *   epilog  (job_script: `slurmstepd spank epilog`, root)
 *           job_epilog: wait for a handed-off start, handoff.c
 *           stamp the epilog's start,                prolog.c
 *           then the Go core tells the supervisor,
 *           stops it, removes the record
 *
 * Apart from task_init, no callback in slurmstepd or in the prolog/epilog
 * returns non-zero: a failure there must never drain a node.
 */
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm_version.h>
#include <slurm/spank.h>

#include "args.h"
#include "compat.h"
#include "log.h"
#include "phase.h"
#include "prolog.h"
#include "step.h"
#include "submit.h"

SPANK_PLUGIN(gym_otel, 1);

#if GOS_SLURM_AT_LEAST(25, 5)
/*
 * 25.05+: a failing remote init fails the job, not the node. spank.h
 * declares it `extern int` (not const): Slurm reads it through dlsym.
 */
int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE;
#endif

static struct gos_option opt;
static struct gos_args args;
static int args_ok;

static int option_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)remote;
	free(opt.value);
	opt.given = 1;
	/* A bare flag arrives as NULL, or as "(null)" on 24.11. */
	opt.value = strdup(optarg && strcmp(optarg, "(null)") ? optarg : "");
	return 0; /* never fail a step for this (remote context) */
}

static struct spank_option option = {
	"gym-otel",
	"SPEC",
	"Run an OpenTelemetry Collector for this job on each of its nodes. "
	"SPEC: empty/on, off, or key=value items (config=, job_dir=, run_id=, "
	"benchmark=, model=, cluster= and otel keys), comma separated.",
	2, /* optional argument */
	0,
	option_cb,
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_err_t rc;

	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
	case S_CTX_REMOTE:
		break;
	default:
		return 0;
	}
	rc = spank_option_register(sp, &option);
	if (rc != ESPANK_SUCCESS)
		gos_error("registering --gym-otel: %s", spank_strerror(rc));
	args_ok = gos_args_parse(&args, ac, av) == 0;
	if (args_ok)
		return 0;
	if (spank_context() == S_CTX_REMOTE) {
		/* Never drain a node for a typo: log it, feature off. */
		gos_error("%s (the plugin is off in this step)", args.err);
		return 0;
	}
	/* Submit contexts: reported (and fatal) in init_post_opt. */
	return 0;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return gos_submit_init_post_opt(sp, &opt, &args, args_ok);
	case S_CTX_REMOTE:
		if (args_ok)
			gos_step_init_post_opt(sp, &args);
		return 0;
	default:
		return 0;
	}
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return gos_step_task_init(sp);
}

int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() == S_CTX_REMOTE)
		gos_step_task_post_fork(sp);
	return 0; /* a failing task_post_fork would drain the node */
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_context() == S_CTX_REMOTE) {
		gos_phase_task_exit(sp);
		gos_step_task_exit(sp);
		gos_phase_task_exit_done();
	}
	return 0;
}

#ifndef GOS_STEP_ONLY
/*
 * Not in gym_otel_step.so (built with -DGOS_STEP_ONLY): slurmd starts a
 * `slurmstepd spank prolog|epilog` for every job on every node as soon as
 * one plugin of the plugstack exports either symbol (plugstack.c's
 * spank_stack_plugin_valid_for_context sets has_prolog/has_epilog from
 * them; prep_script_slurmd.c's slurmd_script runs the SPANK job script
 * only when spank_has_prolog()/spank_has_epilog()), flagged job or not.
 */
int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	gos_job_prolog(sp, ac, av);
	return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	gos_job_epilog(sp, ac, av);
	return 0;
}
#endif

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)sp;
	(void)ac;
	(void)av;
	if (spank_context() == S_CTX_REMOTE) {
		gos_phase_step_end();
		gos_step_exit(sp, args_ok ? &args : NULL);
	}
	gos_args_free(&args);
	free(opt.value);
	opt.value = NULL;
	opt.given = 0;
	return 0;
}
