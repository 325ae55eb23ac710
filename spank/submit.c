/*
 * submit.c: the submit contexts (local: srun; allocator: sbatch, salloc),
 * as the user, in slurm_spank_init_post_opt.
 *
 * Jobs without the flag (and without default=on) return at once: the Go
 * core is not loaded. Otherwise the core resolves and validates the job's
 * settings; on success exactly two job-control variables are forwarded
 * (GYM_OTEL_SPEC, GYM_OTEL_TOKEN) and the token variable is removed from
 * the client's environment so it does not also travel in the job's env.
 *
 * An sbatch from inside a running --gym-otel job (Gym's auto-resume
 * submits the next link of its chain so) inherits the option through the
 * job's SLURM_SPANK_* env but not the token, which the steps removed: the
 * core then takes the token from that job's collector on this node and
 * hands it back as its "token" line, forwarded like any other.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "args.h"
#include "compat.h"
#include "core.h"
#include "gym_otel_contract.h"
#include "log.h"
#include "submit.h"

/* The env var with which sbatch hands --gym-otel to the steps of the job. */
#define GOS_OPTION_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_gym_otel_gym_otel"

/* Print each line of core output with key k through fn. */
static void each_line(const char *out, const char *k, int err)
{
	size_t kl = strlen(k);
	const char *p = out;

	while (p && *p) {
		const char *nl = strchr(p, '\n');
		int n = nl ? (int)(nl - p) : (int)strlen(p);

		if (n > (int)kl && !strncmp(p, k, kl) && p[kl] == '=') {
			if (err)
				slurm_error(GOS_PREFIX "%.*s", n - (int)kl - 1, p + kl + 1);
			else
				slurm_spank_log(GOS_PREFIX "warning: %.*s", n - (int)kl - 1, p + kl + 1);
		}
		p = nl ? nl + 1 : NULL;
	}
}

/* The value of key k in the core's output (malloc'ed), or NULL. */
static char *get_line(const char *out, const char *k)
{
	size_t kl = strlen(k);
	const char *p = out;

	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);

		if (n > kl && !strncmp(p, k, kl) && p[kl] == '=')
			return strndup(p + kl + 1, n - kl - 1);
		p = nl ? nl + 1 : NULL;
	}
	return NULL;
}

/* srun inside an existing job (allocation) */
static int inside_job(void)
{
	return spank_context() == S_CTX_LOCAL && getenv("SLURM_JOB_ID");
}

static int nested_in_flagged_job(void)
{
	/* GYM_OTEL_JOB: set by the steps of a job that has the collector
	 * (step.c) and by salloc's client after its submit; the option env:
	 * how sbatch hands the option to the steps. */
	return getenv(GOS_ENV_IN_JOB) || getenv(GOS_OPTION_ENV);
}

/*
 * What slurm.conf's PrologFlags make impossible, or NULL. The job prolog
 * starts each node's collector, so it must run on every node at
 * allocation (Alloc). Without Alloc it runs on a node only at the node's
 * first step, with that step's environment, which does not hold the job's
 * spec: only the batch host would get a collector, and salloc jobs none.
 * RunInJob (Slurm 23.11+) moves the job prolog and epilog into the job's
 * extern step, where Slurm 24.11 calls no SPANK job_prolog/job_epilog.
 * Asks slurmctld (one RPC, only for jobs that want a collector); an
 * unreachable controller is not this plugin's to report.
 */
static const char *prolog_flags_problem(void)
{
	slurm_conf_t *conf = NULL;
	const char *why = NULL;

	if (slurm_load_ctl_conf((time_t)0, &conf) != SLURM_SUCCESS || !conf)
		return NULL;
#ifdef PROLOG_FLAG_RUN_IN_JOB
	if (conf->prolog_flags & PROLOG_FLAG_RUN_IN_JOB)
		why = "PrologFlags=RunInJob is set in slurm.conf: the job prolog runs "
		      "inside the job, where Slurm runs no SPANK job prolog, so no node "
		      "could start the job's collector; ask the admins for "
		      "PrologFlags=Alloc without RunInJob";
#endif
	if (!why && !(conf->prolog_flags & PROLOG_FLAG_ALLOC))
		why = "PrologFlags=Alloc is not set in slurm.conf: the job prolog would "
		      "run on a node only at its first step, without the job's settings, "
		      "so only the batch host could start a collector (and no node of an "
		      "salloc); ask the admins for PrologFlags=Alloc";
	gos_free_conf(conf);
	return why;
}

int gos_submit_init_post_opt(spank_t sp, const struct gos_option *opt,
			     struct gos_args *a, int args_ok)
{
	int explicit_flag = opt->given;
	const char *val = opt->value ? opt->value : "";
	struct gos_core core;
	char cwd[PATH_MAX];
	char *out = NULL, *spec = NULL, *token_env = NULL, *chain_token = NULL;
	const char *token, *why;
	int rc, ret = 0;

	if (!args_ok) {
		slurm_error(GOS_PREFIX "%s", a->err);
		return -1;
	}
	if (!explicit_flag && !a->default_on)
		return 0;
	if (!strcmp(val, "off"))
		return 0;
	if (inside_job()) {
		/* A step of a job: the allocation decided. Never validate or
		 * forward again, never start a second collector. */
		if (nested_in_flagged_job() || !explicit_flag)
			return 0;
		slurm_error(GOS_PREFIX "--gym-otel must be given to the allocation "
			    "(sbatch/salloc), not to an srun inside it");
		return -1;
	}

	if ((why = prolog_flags_problem())) {
		if (explicit_flag) {
			slurm_error(GOS_PREFIX "%s", why);
			return -1;
		}
		slurm_spank_log(GOS_PREFIX "warning: the job runs without a collector "
				"(plugstack default=on): %s", why);
		return 0;
	}
	if (gos_core_open(a, &core))
		return explicit_flag ? -1 : 0;
	if (!getcwd(cwd, sizeof(cwd)))
		snprintf(cwd, sizeof(cwd), "/");
	rc = core.submit(a->joined, val, cwd, &out);
	each_line(out, "warning", 0);
	if (rc != 0) {
		if (explicit_flag) {
			each_line(out, "error", 1);
			ret = -1;
		} else {
			char *first = get_line(out, "error");

			slurm_spank_log(GOS_PREFIX "warning: the job runs without a collector "
					"(plugstack default=on): %s", first ? first : "invalid settings");
			free(first);
		}
		goto done;
	}
	if ((spec = get_line(out, "off")))
		goto done;
	spec = get_line(out, "spec");
	token_env = get_line(out, "token_env");
	chain_token = get_line(out, "token");
	token = chain_token ? chain_token : token_env ? getenv(token_env) : NULL;
	/* No token_env line: remote export is off (otel.delivery: none), and
	 * no token travels. */
	if (!spec || (token_env && (!token || !*token))) {
		slurm_error(GOS_PREFIX "internal error: no spec or token from the core");
		ret = explicit_flag ? -1 : 0;
		goto done;
	}
	if (spank_job_control_setenv(sp, GOS_JOB_CONTROL_SPEC, spec, 1) != ESPANK_SUCCESS ||
	    (token_env && spank_job_control_setenv(sp, GOS_JOB_CONTROL_TOKEN, token, 1) != ESPANK_SUCCESS)) {
		slurm_error(GOS_PREFIX "spank_job_control_setenv failed");
		ret = explicit_flag ? -1 : 0;
		goto done;
	}
	/* The token travels once, as the job-control variable. */
	if (token_env)
		unsetenv(token_env);
	if (!strcmp(program_invocation_short_name, "salloc"))
		setenv(GOS_ENV_IN_JOB, "salloc", 1);
done:
	if (out) {
		explicit_bzero(out, strlen(out));
		core.free(out);
	}
	if (chain_token) {
		explicit_bzero(chain_token, strlen(chain_token));
		free(chain_token);
	}
	free(spec);
	free(token_env);
	return ret;
}
