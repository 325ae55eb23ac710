/*
 * submit.h: the submit contexts (submit.c).
 */
#ifndef GYM_OTEL_SUBMIT_H
#define GYM_OTEL_SUBMIT_H

#include <slurm/spank.h>

struct gos_args;

/* The --gym-otel option as the dispatcher saw it (gym_otel.c). */
struct gos_option {
	int given;   /* --gym-otel was seen (command line or SLURM_SPANK_* env) */
	char *value; /* its value, "" for a bare flag */
};

int gos_submit_init_post_opt(spank_t sp, const struct gos_option *opt,
			     struct gos_args *a, int args_ok);

#endif
