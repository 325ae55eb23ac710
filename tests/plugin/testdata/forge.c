/*
 * forge: submit a batch job through libslurm with job-control variables set
 * by hand (the job's spank_job_env), without any SPANK plugin involved: what
 * a hostile user can do to hand the job prolog a GYM_OTEL_SPEC of their own.
 *
 *   forge SPEC WORKDIR OUTPUT NODE   prints "Submitted batch job N"
 *
 * SPEC may be @FILE: the value is FILE's content (too long for a command
 * line).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

extern char **environ;

int main(int argc, char **argv)
{
	job_desc_msg_t d;
	submit_response_msg_t *resp = NULL;
	char *senv[2], *value = argc > 1 ? argv[1] : "", *spec;
	static char buf[1 << 20];
	size_t n;
	uint32_t envc = 0;

	if (argc != 5) {
		fprintf(stderr, "usage: forge SPEC|@FILE WORKDIR OUTPUT NODE\n");
		return 2;
	}
	if (value[0] == '@') {
		FILE *f = fopen(value + 1, "r");
		size_t got = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (!f) {
			perror(value + 1);
			return 2;
		}
		fclose(f);
		buf[got] = 0;
		value = buf;
	}
	n = strlen("GYM_OTEL_SPEC=") + strlen(value) + 1;
	spec = malloc(n);
	if (!spec)
		return 2;
	slurm_init(NULL);
	slurm_init_job_desc_msg(&d);
	snprintf(spec, n, "GYM_OTEL_SPEC=%s", value);
	senv[0] = spec;
	senv[1] = "GYM_OTEL_TOKEN=x";
	d.spank_job_env = senv;
	d.spank_job_env_size = 2;
	d.name = "forged";
	d.script = "#!/bin/sh\necho forged\n";
	d.user_id = getuid();
	d.group_id = getgid();
	d.work_dir = argv[2];
	d.std_out = argv[3];
	d.min_nodes = 1;
	d.req_nodes = argv[4];
	while (environ[envc])
		envc++;
	d.environment = environ;
	d.env_size = envc;
	if (slurm_submit_batch_job(&d, &resp) != SLURM_SUCCESS || !resp) {
		slurm_perror("slurm_submit_batch_job");
		return 1;
	}
	/* 26.05's response carries the job's step id (job id and SLUID). */
#if defined(SLURM_VERSION_NUMBER) && SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(26, 5, 0)
	printf("Submitted batch job %u\n", resp->step_id.job_id);
#else
	printf("Submitted batch job %u\n", resp->job_id);
#endif
	return 0;
}
