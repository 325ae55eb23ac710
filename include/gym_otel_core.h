/*
 * gym_otel_core.h: the C ABI between the gym_otel SPANK plugin's C front
 * (gym_otel.so) and its Go core (gym_otel_core.so, spank/core).
 *
 * The front dlopens the core only for jobs that asked for a collector, and
 * never in a slurmstepd step process. Strings are NUL-terminated UTF-8;
 * the core never keeps a pointer it was given. A string the core returns
 * through an out parameter is freed with gym_otel_core_free().
 *
 * Plugstack arguments are passed as one string, the arguments joined by
 * '\n' ("site=/etc/slurm/gym-otel.yaml\non_failure=fail").
 */
#ifndef GYM_OTEL_CORE_H
#define GYM_OTEL_CORE_H

/*
 * Submit context (sbatch, salloc, srun outside a job), as the user:
 * resolve and validate the job's settings. spec is the value of --gym-otel
 * ("" for a bare flag), cwd the working directory; the token variable is
 * looked up in the process environment.
 *
 * *out receives lines "key=value\n":
 *   warning=<text>    print it, the job is still submitted
 *   error=<text>      one line of an error (several lines may follow)
 *   off=1             the job opted out: forward nothing
 *   spec=<encoded>    the value of the job-control variable GYM_OTEL_SPEC
 *   token_env=<NAME>  the variable whose value to forward as GYM_OTEL_TOKEN
 *   token=<value>     the backend token itself, given only to an sbatch run
 *                     inside a --gym-otel job (the next link of a chain),
 *                     taken from that job's collector on this node; it is
 *                     forwarded as GYM_OTEL_TOKEN, never printed or logged
 * Returns 0 on success (spec/token_env or off given), 1 when invalid.
 */
int gym_otel_core_submit(const char *args, const char *spec, const char *cwd,
			 char **out);

/*
 * Job prolog (root, `slurmstepd spank prolog`): start the job's supervisor
 * on this node as the job's user and write root's record (see
 * helper/record/record.go and spank/record.c). encoded and token are the
 * forwarded SPANK_GYM_OTEL_SPEC (the job's settings, encoded) and
 * SPANK_GYM_OTEL_TOKEN. Logs through Slurm's log functions. Returns 0, or 1
 * when it failed (already logged); the prolog returns 0 to Slurm either way.
 */
int gym_otel_core_prolog(const char *args, const char *encoded,
			 const char *token, unsigned int job_id,
			 unsigned int uid, unsigned int gid);

/*
 * Job epilog (root), all within the epilog's deadline (prolog_timeout from
 * args, the plugstack arguments joined by '\n', and Slurm's EpilogTimeout):
 * tell the supervisor recorded in <record_dir>/<node>/<job_id>/record the
 * epilog's start on its control socket and stop it (SIGTERM, a wait bounded
 * by the record's drain bound), end what is left of the job's collector
 * cgroup (or SIGKILL the supervisor's session on a node without one),
 * remove the job's rules of the node's packet filter and that directory,
 * then end orphaned groups of earlier jobs on the node. record_dir is the
 * one to use whatever args say. Returns 0, or 1 on a logged problem.
 */
int gym_otel_core_epilog(const char *args, const char *record_dir,
			 const char *node, unsigned int job_id);

/* Frees a string returned by the core. */
void gym_otel_core_free(char *p);

#endif /* GYM_OTEL_CORE_H */
