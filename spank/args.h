/*
 * args.h: the plugstack.conf arguments C reads (args.c).
 */
#ifndef GYM_OTEL_ARGS_H
#define GYM_OTEL_ARGS_H

struct gos_args {
	int default_on;
	int job_output; /* job_output=on (default): the batch step's line in the job's output */
	int wait_step;  /* collector_wait=step: the steps, not the prolog, wait for the collector */
	int prolog_timeout; /* prolog_timeout=, seconds (default GOS_DEFAULT_PROLOG_TIMEOUT) */
	char *record_dir;
	char *core;
	char *joined; /* every argument, joined by '\n', for the Go core */
	char err[512]; /* the first problem, naming the argument */
};
/* 0, or -1 with the problem in a->err. */
int gos_args_parse(struct gos_args *a, int ac, char **av);
void gos_args_free(struct gos_args *a);
/* Cleans an absolute path in place, as Go's filepath.Clean. */
void gos_clean_path(char *p);

#endif
