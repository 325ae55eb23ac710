/*
 * prolog.h: the job prolog and epilog, as root (prolog.c).
 */
#ifndef GYM_OTEL_PROLOG_H
#define GYM_OTEL_PROLOG_H

#include <slurm/spank.h>

int gos_job_prolog(spank_t sp, int ac, char **av);
int gos_job_epilog(spank_t sp, int ac, char **av);

#endif
