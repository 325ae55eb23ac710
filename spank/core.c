/*
 * core.c: loading the Go core (gym_otel_core.so) on demand.
 *
 * Found at the plugstack argument core=PATH, else beside gym_otel.so itself
 * (dladdr of one of our symbols). Loaded RTLD_LOCAL; the core is linked with
 * -z nodelete, so Slurm's dlclose of the front never unmaps a Go runtime.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "core.h"
#include "log.h"

static int core_path(const struct gos_args *a, char *buf, size_t len)
{
	Dl_info info;
	const char *slash;

	if (a->core) {
		snprintf(buf, len, "%s", a->core);
		return 0;
	}
	if (!dladdr((void *)gos_core_open, &info) || !info.dli_fname)
		return -1;
	slash = strrchr(info.dli_fname, '/');
	if (!slash)
		snprintf(buf, len, "%s", GOS_CORE_NAME);
	else
		snprintf(buf, len, "%.*s/%s", (int)(slash - info.dli_fname),
			 info.dli_fname, GOS_CORE_NAME);
	return 0;
}

int gos_core_open(const struct gos_args *a, struct gos_core *c)
{
	char path[PATH_MAX];

	memset(c, 0, sizeof(*c));
	if (core_path(a, path, sizeof(path))) {
		gos_error("cannot tell where gym_otel.so is; set core=PATH in plugstack.conf");
		return -1;
	}
	gos_debug("loading the Go core %s", path);
	c->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!c->handle) {
		gos_error("loading the Go core %s: %s", path, dlerror());
		return -1;
	}
	c->submit = dlsym(c->handle, "gym_otel_core_submit");
	c->prolog = dlsym(c->handle, "gym_otel_core_prolog");
	c->epilog = dlsym(c->handle, "gym_otel_core_epilog");
	c->free = dlsym(c->handle, "gym_otel_core_free");
	if (!c->submit || !c->prolog || !c->epilog || !c->free) {
		gos_error("%s: not the gym-otel Go core (missing symbols)", path);
		return -1;
	}
	return 0;
}
