/*
 * args.c: the plugstack.conf arguments, parsed again in every context
 * (each is another process). C knows its own keys; every other
 * `key=value` (an otel key such as on_failure=fail) is handed to the Go
 * core, which validates it (helper/plugin/args.go).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gym_otel.h"

static int valid_key(const char *k, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((k[i] >= 'a' && k[i] <= 'z') || k[i] == '_'))
			return 0;
	return 1;
}

static int set_path(struct gos_args *a, char **dst, const char *arg, const char *v)
{
	if (v[0] != '/') {
		snprintf(a->err, sizeof(a->err),
			 "plugstack.conf argument \"%s\": wants an absolute path", arg);
		return -1;
	}
	free(*dst);
	*dst = strdup(v);
	return *dst ? 0 : -1;
}

void gos_args_free(struct gos_args *a)
{
	free(a->site);
	free(a->cli);
	free(a->record_dir);
	free(a->core);
	free(a->joined);
	memset(a, 0, sizeof(*a));
}

int gos_args_parse(struct gos_args *a, int ac, char **av)
{
	size_t len = 1;
	int rc = 0;

	gos_args_free(a);
	a->prolog_timeout = GOS_DEFAULT_PROLOG_TIMEOUT;
	a->cli = strdup(GOS_DEFAULT_CLI);
	a->record_dir = strdup(GOS_DEFAULT_RECORD_DIR);
	for (int i = 0; i < ac; i++)
		len += strlen(av[i]) + 1;
	a->joined = calloc(1, len);
	if (!a->cli || !a->record_dir || !a->joined) {
		snprintf(a->err, sizeof(a->err), "out of memory");
		return -1;
	}
	for (int i = 0; i < ac && rc == 0; i++) {
		const char *arg = av[i];
		const char *eq = strchr(arg, '=');
		const char *v;

		if (!eq || !valid_key(arg, eq - arg)) {
			snprintf(a->err, sizeof(a->err),
				 "plugstack.conf argument \"%s\": expected key=value "
				 "(keys: site, default, prolog_timeout, cli, record_dir, "
				 "core, or an otel key)", arg);
			rc = -1;
			break;
		}
		v = eq + 1;
		if (a->joined[0])
			strcat(a->joined, "\n");
		strcat(a->joined, arg);
#define KEY_IS(k) (strlen(k) == (size_t)(eq - arg) && !strncmp(arg, k, eq - arg))
		if (KEY_IS("site")) {
			rc = set_path(a, &a->site, arg, v);
		} else if (KEY_IS("cli")) {
			rc = set_path(a, &a->cli, arg, v);
		} else if (KEY_IS("record_dir")) {
			rc = set_path(a, &a->record_dir, arg, v);
		} else if (KEY_IS("core")) {
			rc = set_path(a, &a->core, arg, v);
		} else if (KEY_IS("default")) {
			if (!strcmp(v, "on")) {
				a->default_on = 1;
			} else if (!strcmp(v, "off")) {
				a->default_on = 0;
			} else {
				snprintf(a->err, sizeof(a->err),
					 "plugstack.conf argument \"%s\": default wants on or off", arg);
				rc = -1;
			}
		} else if (KEY_IS("prolog_timeout")) {
			char *end;
			long n;

			errno = 0;
			n = strtol(v, &end, 10);
			if (errno || end == v || *end || n < 1 || n > 3600) {
				snprintf(a->err, sizeof(a->err),
					 "plugstack.conf argument \"%s\": prolog_timeout wants whole seconds, 1..3600", arg);
				rc = -1;
			} else {
				a->prolog_timeout = (int)n;
			}
		}
		/* Any other key: an otel key, checked by the Go core. */
#undef KEY_IS
	}
	return rc;
}
