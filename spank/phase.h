/*
 * phase.h: a step's start and end, told to the job's supervisor on the
 * node for its phase spans (phase.c).
 */
#ifndef GYM_OTEL_PHASE_H
#define GYM_OTEL_PHASE_H

#include <stdint.h>
#include <slurm/spank.h>

#include "record.h"

/* init_post_opt: the step starts (r: root's record of a ready collector). */
void gos_phase_step_start(spank_t sp, uint32_t job_id, uint32_t step_id, const struct gos_record *r);
/* task_exit, before the batch step's hold: a task's exit status. */
void gos_phase_task_exit(spank_t sp);
/* task_exit, after the hold: the final wait's end. */
void gos_phase_task_exit_done(void);
/* slurm_spank_exit: the step ends. */
void gos_phase_step_end(void);

#endif
