/*
 * notice.h: what a step tells slurmd's log and the user's tasks about the
 * job's collector on the node (notice.c).
 */
#ifndef GYM_OTEL_NOTICE_H
#define GYM_OTEL_NOTICE_H

#include <stdint.h>
#include <slurm/spank.h>

/* init_post_opt, in slurmd's log. */
/* The job asked for a collector but the node has no record of it. */
void gos_notice_no_record(uint32_t job_id, const char *node);
/* Variables the user set before the plugin, kept over the collector's. */
void gos_notice_kept(uint32_t job_id, uint32_t step_id, const char *kept);
/* No collector on the node, on_failure=continue: logged once per job and
 * node (a marker in the job's record dir, dir). 1 when this step made the
 * marker, so its tasks tell the user (gos_notice_task_off). */
int gos_notice_off_once(const char *dir, uint32_t job_id, const char *node, const char *reason);

/* task_init, in the forked task: on one task's stderr (write(2) only). */
void gos_notice_task_no_record(spank_t sp, const char *node);
void gos_notice_task_kept(spank_t sp, uint32_t job_id, const char *kept);
void gos_notice_task_off(spank_t sp, const char *node, const char *reason);
/* The batch step's task 0: where the job's telemetry is, where it is
 * shipped, and the command that reads it (job_output=on). */
void gos_notice_task_telemetry(spank_t sp, uint32_t job_id, const char *output_dir,
			       const char *backend);
/* on_failure=fail: why the tasks fail, in slurmstepd's log. */
void gos_notice_task_failed(uint32_t job_id, const char *node, const char *reason);

#endif
