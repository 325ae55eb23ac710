/*
 * hold.h: the batch step's hold after the script's last line (hold.c).
 */
#ifndef GYM_OTEL_HOLD_H
#define GYM_OTEL_HOLD_H

#include <stdint.h>
#include <slurm/spank.h>

/* At the batch script's end (task_exit): holds the job up to seconds for
 * the collector's final scrape on node, bounded in wall-clock time, and
 * only until the supervisor (on control_socket, the path from root's record;
 * "" for none) says every target of the job has a sample. */
void gos_hold(spank_t sp, uint32_t job_id, int seconds, const char *node, const char *control_socket);

#endif
