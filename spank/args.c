/*
 * args.c: the plugstack.conf arguments, parsed again in every context
 * (each is another process). C reads only the four it uses: default
 * (submit), record_dir (prolog, epilog, every step), core (where the Go
 * core is), job_output (the batch step), collector_wait and
 * prolog_timeout (the prolog, the steps and the epilog, spank/handoff.c). Every argument, these
 * included, is handed to the Go core, which validates them all
 * (helper/callbacks/args.go) with the same rules for these four: a key given twice is refused, a path must be absolute and is
 * cleaned as Go's filepath.Clean does, an empty argument is skipped.
 * helper/callbacks/args_c_test.go compares the two parsers on one set of
 * arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "gym_otel_contract.h"

static int valid_key(const char *k, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((k[i] >= 'a' && k[i] <= 'z') || k[i] == '_'))
			return 0;
	return 1;
}

/*
 * Clean an absolute path in place, as Go's filepath.Clean: repeated
 * slashes become one, "." elements go, ".." removes the element before it
 * (at the root it stays the root), no trailing slash but for "/".
 */
void gos_clean_path(char *p)
{
	/* p[0] is '/'. r reads, w writes; w never passes r. */
	size_t len = strlen(p), r = 1, w = 1;

	while (r < len) {
		size_t n;

		if (p[r] == '/') {
			r++;
			continue;
		}
		n = strcspn(p + r, "/");
		if (n == 1 && p[r] == '.') {
			/* skip */
		} else if (n == 2 && p[r] == '.' && p[r + 1] == '.') {
			while (w > 1 && p[w - 1] != '/')
				w--;
			if (w > 1)
				w--;
		} else {
			if (w > 1)
				p[w++] = '/';
			memmove(p + w, p + r, n);
			w += n;
		}
		r += n;
	}
	p[w] = '\0';
}

static int set_path(struct gos_args *a, char **dst, const char *arg, const char *k, const char *v)
{
	if (v[0] != '/') {
		snprintf(a->err, sizeof(a->err),
			 "plugstack.conf argument \"%s\": %s wants an absolute path", arg, k);
		return -1;
	}
	free(*dst);
	*dst = strdup(v);
	if (!*dst)
		return -1;
	gos_clean_path(*dst);
	return 0;
}

void gos_args_free(struct gos_args *a)
{
	free(a->record_dir);
	free(a->core);
	free(a->joined);
	memset(a, 0, sizeof(*a));
}

/* given reports whether av[0..i) has an argument with key k (n bytes). */
static int given(char **av, int i, const char *k, size_t n)
{
	for (int j = 0; j < i; j++)
		if (!strncmp(av[j], k, n) && av[j][n] == '=')
			return 1;
	return 0;
}

int gos_args_parse(struct gos_args *a, int ac, char **av)
{
	size_t len = 1;
	int rc = 0;

	gos_args_free(a);
	a->record_dir = strdup(GOS_DEFAULT_RECORD_DIR);
	a->job_output = 1;
	a->prolog_timeout = GOS_DEFAULT_PROLOG_TIMEOUT;
	for (int i = 0; i < ac; i++)
		len += strlen(av[i]) + 1;
	a->joined = calloc(1, len);
	if (!a->record_dir || !a->joined) {
		snprintf(a->err, sizeof(a->err), "out of memory");
		return -1;
	}
	for (int i = 0; i < ac && rc == 0; i++) {
		const char *arg = av[i];
		const char *eq = strchr(arg, '=');
		const char *v;
		size_t n;

		if (!arg[0])
			continue;
		if (!eq || !valid_key(arg, eq - arg)) {
			snprintf(a->err, sizeof(a->err),
				 "plugstack.conf argument \"%s\": expected key=value "
				 "(key: lower-case letters and _)", arg);
			rc = -1;
			break;
		}
		n = (size_t)(eq - arg);
		v = eq + 1;
		if (a->joined[0])
			strcat(a->joined, "\n");
		strcat(a->joined, arg);
#define KEY_IS(k) (strlen(k) == n && !strncmp(arg, k, n))
		if (KEY_IS("prolog_timeout")) {
			/* the Go core checks it (1..3600) and reports it; C only
			 * reads it, keeping the default for a bad value */
			int t = atoi(v);

			if (t >= 1 && t <= 3600)
				a->prolog_timeout = t;
			continue;
		}
		if (!KEY_IS("record_dir") && !KEY_IS("core") && !KEY_IS("default") &&
		    !KEY_IS("job_output") && !KEY_IS("collector_wait"))
			continue; /* the Go core's, or an otel key: checked there */
		if (given(av, i, arg, n)) {
			snprintf(a->err, sizeof(a->err),
				 "plugstack.conf argument \"%s\": %.*s given twice", arg, (int)n, arg);
			rc = -1;
		} else if (KEY_IS("record_dir")) {
			rc = set_path(a, &a->record_dir, arg, "record_dir", v);
		} else if (KEY_IS("core")) {
			rc = set_path(a, &a->core, arg, "core", v);
		} else if (KEY_IS("job_output")) {
			if (!strcmp(v, "on") || !strcmp(v, "off")) {
				a->job_output = !strcmp(v, "on");
			} else {
				snprintf(a->err, sizeof(a->err),
					 "plugstack.conf argument \"%s\": job_output wants on or off", arg);
				rc = -1;
			}
		} else if (KEY_IS("collector_wait")) {
			if (!strcmp(v, "prolog") || !strcmp(v, "step")) {
				a->wait_step = !strcmp(v, "step");
			} else {
				snprintf(a->err, sizeof(a->err),
					 "plugstack.conf argument \"%s\": collector_wait wants prolog or step", arg);
				rc = -1;
			}
		} else if (!strcmp(v, "on")) {
			a->default_on = 1;
		} else if (!strcmp(v, "off")) {
			a->default_on = 0;
		} else {
			snprintf(a->err, sizeof(a->err),
				 "plugstack.conf argument \"%s\": default wants on or off", arg);
			rc = -1;
		}
#undef KEY_IS
	}
	return rc;
}
