/*
 * log.h: the plugin's log lines, through Slurm's log functions (slurmd's,
 * slurmstepd's or the client's log), each starting with GOS_PREFIX.
 */
#ifndef GYM_OTEL_LOG_H
#define GYM_OTEL_LOG_H

#include <slurm/spank.h>

#define GOS_PREFIX "gym-otel: "

#define gos_error(fmt, ...) slurm_error(GOS_PREFIX fmt, ##__VA_ARGS__)
#define gos_info(fmt, ...) slurm_info(GOS_PREFIX fmt, ##__VA_ARGS__)
#define gos_debug(fmt, ...) slurm_debug(GOS_PREFIX fmt, ##__VA_ARGS__)

#endif
