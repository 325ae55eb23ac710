/*
 * phase.h: a step's start and end, told to the job's supervisor on the
 * node for its phase spans (phase.c).
 */
#ifndef GYM_OTEL_PHASE_H
#define GYM_OTEL_PHASE_H

#include <stdint.h>
#include <slurm/spank.h>

#include "gym_otel_contract.h"
#include "record.h"

/* init_post_opt: the step starts (r: root's record of a ready collector).
 * traceparent (GOS_TRACEPARENT_LEN, a W3C trace-context traceparent)
 * gets the context the step's tasks run in, as the supervisor
 * answered it, or "" (no answer in time, an answer without one, or not a
 * valid traceparent). */
void gos_phase_step_start(spank_t sp, uint32_t job_id, uint32_t step_id, const struct gos_record *r,
			  char traceparent[GOS_TRACEPARENT_LEN + 1]);
/* task_exit, before the batch step's hold: a task's exit status. */
void gos_phase_task_exit(spank_t sp);
/* task_exit, after the hold: the final wait's end. */
void gos_phase_task_exit_done(void);
/* slurm_spank_exit: the step ends. */
void gos_phase_step_end(void);

#endif
