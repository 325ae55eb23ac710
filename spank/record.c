/*
 * record.c: reading root's record (written by the prolog through the Go
 * core; format in helper/record/record.go) in a step, in pure C.
 *
 * The record is trusted only when its directory and file are root's and
 * writable by no one else, and the file is read without following links.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gym_otel_contract.h"
#include "record.h"

#define RECORD_MAX (1 << 20)

/* Whether line p is "k=...", k a key of the contract (a string literal),
 * and its value. */
#define KEY(p, k) (!strncmp((p), k "=", sizeof(k)))
#define VAL(p, k) ((p) + sizeof(k))

void gos_record_free(struct gos_record *r)
{
	for (int i = 0; i < r->nenv; i++)
		free(r->env[i]);
	for (int i = 0; i < r->nunset; i++)
		free(r->unset[i]);
	for (int i = 0; i < r->nresattr; i++)
		free(r->resattr[i]);
	free(r->env);
	free(r->unset);
	free(r->resattr);
	memset(r, 0, sizeof(*r));
}

static int push(char ***v, int *n, const char *s)
{
	char **nv = realloc(*v, sizeof(char *) * (*n + 1));

	if (!nv)
		return -1;
	*v = nv;
	if (!(nv[*n] = strdup(s)))
		return -1;
	(*n)++;
	return 0;
}

static int root_only(const struct stat *st)
{
	return st->st_uid == 0 && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

int gos_record_read(const char *record_dir, const char *node, uint32_t job_id,
		    struct gos_record *r, char *err, size_t errlen)
{
	char path[4200];
	struct stat st;
	char *data = NULL;
	ssize_t n, got = 0;
	int fd, rc = -1;

	memset(r, 0, sizeof(*r));
	if (strchr(node, '/')) {
		snprintf(err, errlen, "node name %s holds a /", node);
		return -1;
	}
	snprintf(r->dir, sizeof(r->dir), "%s/%s/%u", record_dir, node, job_id);
	if (lstat(r->dir, &st)) {
		if (errno == ENOENT)
			return 1;
		snprintf(err, errlen, "%s: %s", r->dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode) || !root_only(&st)) {
		snprintf(err, errlen, "%s: not a root-only directory: ignored", r->dir);
		return -1;
	}
	snprintf(path, sizeof(path), "%s/" GOS_RECORD_FILE, r->dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1; /* the prolog has not written it: nothing to do */
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !root_only(&st) ||
	    st.st_size > RECORD_MAX) {
		snprintf(err, errlen, "%s: not a root-only regular file: ignored", path);
		goto out;
	}
	data = malloc(st.st_size + 1);
	if (!data) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	while (got < st.st_size && (n = read(fd, data + got, st.st_size - got)) > 0)
		got += n;
	data[got] = 0;
	rc = gos_record_parse(data, r, err, errlen);
out:
	free(data);
	close(fd);
	return rc;
}

int gos_record_parse(char *data, struct gos_record *r, char *err, size_t errlen)
{
	char *p, *nl;
	int rc = 0;

	r->fail = 0;
	r->starting = 0;
	for (p = data; p && *p; p = nl) {
		nl = strchr(p, '\n');
		if (nl)
			*nl++ = 0;
		if (KEY(p, GOS_RECORD_STATUS)) {
			r->ready = !strcmp(VAL(p, GOS_RECORD_STATUS), "ready");
			r->starting = !strcmp(VAL(p, GOS_RECORD_STATUS), "starting");
		} else if (KEY(p, GOS_RECORD_ON_FAILURE)) {
			r->fail = !strcmp(VAL(p, GOS_RECORD_ON_FAILURE), "fail");
		} else if (KEY(p, GOS_RECORD_REASON)) {
			snprintf(r->reason, sizeof(r->reason), "%s", VAL(p, GOS_RECORD_REASON));
		} else if (KEY(p, GOS_RECORD_FINAL_WAIT)) {
			r->final_wait = atoi(VAL(p, GOS_RECORD_FINAL_WAIT));
			if (r->final_wait < 0)
				r->final_wait = 0;
			if (r->final_wait > GOS_MAX_FINAL_WAIT)
				r->final_wait = GOS_MAX_FINAL_WAIT;
		} else if (KEY(p, GOS_RECORD_SUPERVISOR_PID)) {
			r->supervisor_pid = strtol(VAL(p, GOS_RECORD_SUPERVISOR_PID), NULL, 10);
			if (r->supervisor_pid < 0)
				r->supervisor_pid = 0;
		} else if (KEY(p, GOS_RECORD_SUPERVISOR_START)) {
			r->supervisor_start = strtoull(VAL(p, GOS_RECORD_SUPERVISOR_START), NULL, 10);
		} else if (KEY(p, GOS_RECORD_HOLD_SOCKET)) {
			/* Root's path (in root's record dir), from root's record;
			 * controlsock.c checks the socket and its dir before each
			 * connect. An older record's abstract name is no path.
			 * The control socket's key keeps its first name,
			 * "hold_socket", for jobs running across an upgrade. */
			const char *v = VAL(p, GOS_RECORD_HOLD_SOCKET);

			if (v[0] == '/' && !strstr(v, "/../") && strlen(v) < sizeof(r->control_socket))
				snprintf(r->control_socket, sizeof(r->control_socket), "%s", v);
		} else if (KEY(p, GOS_RECORD_OUTPUT_DIR)) {
			/* Named in the job's output (notice.c): absolute, and
			 * whole or not at all. */
			const char *v = VAL(p, GOS_RECORD_OUTPUT_DIR);

			if (v[0] == '/' && strlen(v) < sizeof(r->output_dir))
				snprintf(r->output_dir, sizeof(r->output_dir), "%s", v);
		} else if (KEY(p, GOS_RECORD_BACKEND)) {
			const char *v = VAL(p, GOS_RECORD_BACKEND);

			if ((!strncmp(v, "http://", 7) || !strncmp(v, "https://", 8)) &&
			    strlen(v) < sizeof(r->backend))
				snprintf(r->backend, sizeof(r->backend), "%s", v);
		} else if (KEY(p, GOS_RECORD_CGROUP_MEMORY)) {
			/* Root's own path (under /sys/fs/cgroup), from root's record. */
			const char *v = VAL(p, GOS_RECORD_CGROUP_MEMORY);

			if (v[0] == '/' && !strstr(v, "/../"))
				snprintf(r->cgroup_memory, sizeof(r->cgroup_memory), "%s", v);
		} else if (KEY(p, GOS_RECORD_CGROUP_CPUSET)) {
			const char *v = VAL(p, GOS_RECORD_CGROUP_CPUSET);

			if (v[0] == '/' && !strstr(v, "/../"))
				snprintf(r->cgroup_cpuset, sizeof(r->cgroup_cpuset), "%s", v);
		} else if (KEY(p, GOS_RECORD_ENV)) {
			const char *v = VAL(p, GOS_RECORD_ENV);

			if (strchr(v, '=') && push(&r->env, &r->nenv, v))
				rc = -1;
		} else if (KEY(p, GOS_RECORD_UNSET)) {
			if (push(&r->unset, &r->nunset, VAL(p, GOS_RECORD_UNSET)))
				rc = -1;
		} else if (KEY(p, GOS_RECORD_RESATTR)) {
			/* "key=value", neither holding a "," (the value is
			 * percent-encoded by the prolog) nor the key an "=". */
			const char *v = VAL(p, GOS_RECORD_RESATTR);
			const char *eq = strchr(v, '=');

			if (eq && eq > v && !strchr(v, ',') && !strchr(eq + 1, '=') &&
			    push(&r->resattr, &r->nresattr, v))
				rc = -1;
		}
	}
	if (rc) {
		snprintf(err, errlen, "out of memory");
		gos_record_free(r);
	}
	return rc;
}

/*
 * Whether the record's supervisor still runs: /proc/<pid>/stat names a
 * process that is not a zombie and started at the recorded time (field 22;
 * the command name, field 2, may hold spaces and parentheses: parse from
 * its last ')'). A supervisor that gave up on its collector (it died too
 * often, or another user took its ports) has exited, and so has one the
 * user killed.
 */
int gos_supervisor_alive(const struct gos_record *r)
{
	char path[64], buf[1024], *p, *end;
	unsigned long long start;
	ssize_t n;
	int fd;

	if (r->supervisor_pid <= 1)
		return 0;
	snprintf(path, sizeof(path), "/proc/%ld/stat", r->supervisor_pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return 0;
	p += 2; /* field 3, the state */
	if (*p == 'Z' || *p == 'X')
		return 0;
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return 0;
		p++;
	}
	start = strtoull(p, &end, 10);
	return end != p && start == r->supervisor_start;
}
