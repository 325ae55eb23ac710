/*
 * step.h: every step of a job, in slurmstepd (step.c).
 */
#ifndef GYM_OTEL_STEP_H
#define GYM_OTEL_STEP_H

#include <slurm/spank.h>

struct gos_args;

int gos_step_init_post_opt(spank_t sp, struct gos_args *a);
int gos_step_task_init(spank_t sp);
int gos_step_task_post_fork(spank_t sp);
int gos_step_task_exit(spank_t sp);
void gos_step_exit(spank_t sp, const struct gos_args *a);

#endif
