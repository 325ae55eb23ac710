/*
 * taskenv.h: the collector's variables in a step's task env (taskenv.c).
 */
#ifndef GYM_OTEL_TASKENV_H
#define GYM_OTEL_TASKENV_H

#include <stddef.h>
#include <stdint.h>
#include <slurm/spank.h>

struct gos_record;

/* Sets the record's env=, but for variables the user set: their names go
 * to kept (", " separated, keptlen bytes); and TRACEPARENT to tp (the
 * step's trace context, or "": none) unless one the plugin did not set is
 * there (kept silently). */
void gos_taskenv_apply(spank_t sp, const struct gos_record *r, const char *tp, uint32_t job_id,
		       char *kept, size_t keptlen);
/* No record on this node: takes out what the plugin set on another node. */
void gos_taskenv_strip(spank_t sp);
/* With a proxy configured, 127.0.0.1 (the collector) bypasses it. */
void gos_taskenv_no_proxy(spank_t sp);

#endif
