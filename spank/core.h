/*
 * core.h: the Go core, loaded on demand (core.c). Its functions' types
 * come from its one C header (include/gym_otel_core.h), which
 * tests/packaging compares with the header cgo generates from the core's
 * exports.
 */
#ifndef GYM_OTEL_CORE_LOADER_H
#define GYM_OTEL_CORE_LOADER_H

#include "gym_otel_core.h"

struct gos_args;

#define GOS_CORE_NAME "gym_otel_core.so"

struct gos_core {
	void *handle;
	__typeof__(gym_otel_core_submit) *submit;
	__typeof__(gym_otel_core_prolog) *prolog;
	__typeof__(gym_otel_core_epilog) *epilog;
	__typeof__(gym_otel_core_free) *free;
};
/* 0, or -1 (logged). */
int gos_core_open(const struct gos_args *a, struct gos_core *c);

#endif
