/*
 * compat.h: the Slurm API calls whose form differs between the releases the
 * plugin is built for (22.05 to 26.05), chosen at compile time by Slurm's own
 * version macros (slurm_version.h). Internal to spank/; one source builds
 * against each release's slurm.h and spank.h with -Werror.
 *
 *   slurm_load_job     26.05: takes a slurm_step_id_t (job id or SLUID); the
 *                      uint32_t form only under SLURM_BACKWARD_COMPAT
 *   slurm_free_conf    26.05: the new name of slurm_free_ctl_conf
 *   slurm_spank_init_failure_mode
 *                      25.05+: declared `extern int` in spank.h (gym_otel.c)
 */
#ifndef GYM_OTEL_COMPAT_H
#define GYM_OTEL_COMPAT_H

#include <stdint.h>
#include <slurm/slurm_version.h>
#include <slurm/slurm.h>

#define GOS_SLURM_AT_LEAST(maj, min) \
	(SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(maj, min, 0))

/* slurm_load_job for one job id: SLURM_SUCCESS or SLURM_ERROR (errno set). */
static inline int gos_load_job(job_info_msg_t **resp, uint32_t job_id,
			       uint16_t show_flags)
{
#if GOS_SLURM_AT_LEAST(26, 5)
	slurm_step_id_t id = SLURM_STEP_ID_INITIALIZER;

	id.job_id = job_id;
	return slurm_load_job(resp, id, show_flags);
#else
	return slurm_load_job(resp, job_id, show_flags);
#endif
}

/* Free what slurm_load_ctl_conf returned. */
static inline void gos_free_conf(slurm_conf_t *conf)
{
#if GOS_SLURM_AT_LEAST(26, 5)
	slurm_free_conf(conf);
#else
	slurm_free_ctl_conf(conf);
#endif
}

#endif
