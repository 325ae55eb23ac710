/*
 * controlsock.c: the steps' one client of the job's supervisor on the node,
 * on the supervisor's control socket (helper/supervise/controlsock.go serves it;
 * the words are helper/contract's, GOS_HOLD_* in gym_otel_contract.h),
 * pure C in slurmstepd: the batch step's question (has every scrape
 * target a sample stamped at or after the script's end? hold.c asks it
 * and ends the hold early on a yes), its final-scrape request before the
 * first question ("final": the supervisor then scrapes every target at
 * once, helper/supervise/finalscrape.go, instead of at each target's next
 * interval), and every step's start and end (phase.c), whose start's
 * answer may carry the step's traceparent. All of them go through
 * gos_control_exchange. (The job epilog's line is sent by the Go core,
 * helper/launch's TellEpilogStart.)
 *
 * The control socket was first the hold socket (the batch step's hold was
 * its one use): its names on disk and on the wire keep that name for jobs
 * running across an upgrade (the record's "hold_socket", the dir
 * "hold/sock", GOS_HOLD_* of the contract, this file's name).
 *
 * The socket is a pathname socket in root's record dir of the job
 * (root's record names it), in a dir of its own that only root can enter:
 * the prolog bound it as root and handed the listener to the supervisor,
 * so no other user, the job's own neither, can connect, flood it or read
 * its answers. It is trusted only when it is a socket owned by root in a
 * directory owned by root that neither group nor others can write (no
 * symbolic link either); less than GOS_HOLD_ANSWER_MAX bytes are read
 * within GOS_HOLD_EXCHANGE_MS, and the answer is trusted no further than ending the job's
 * own hold early or making its phase spans.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "gym_otel_contract.h"
#include "controlsock.h"

/* The answer that takes a line. */
#define OK_LINE GOS_HOLD_OK "\n"

/* The value of "key=<digits>\n" in text, or -1. */
static long long field(const char *text, const char *key)
{
	size_t kl = strlen(key);
	const char *p = text;

	while (p && *p) {
		if (!strncmp(p, key, kl) && p[kl] == '=') {
			char *end;
			long long v;

			errno = 0;
			v = strtoll(p + kl + 1, &end, 10);
			if (errno || end == p + kl + 1 || *end != '\n' || v < 0)
				return -1;
			return v;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

/*
 * Whether path is a socket owned by root in a directory owned by root
 * that neither group nor others can write, neither a symbolic link: only
 * root can have bound it, and no one else can put another in its place.
 */
static int trusted(const char *path)
{
	char dir[GOS_HOLD_PATH_MAX + 1], *slash;
	struct stat st;

	if (path[0] != '/' || strlen(path) > GOS_HOLD_PATH_MAX)
		return 0;
	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	slash[slash == dir ? 1 : 0] = 0;
	if (lstat(dir, &st) || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return 0;
	return !lstat(path, &st) && S_ISSOCK(st.st_mode) && st.st_uid == 0;
}

ssize_t gos_control_exchange(const char *path, const char *line, char buf[GOS_HOLD_ANSWER_MAX + 1])
{
	struct sockaddr_un a;
	size_t ll = strlen(line);
	long long end = gos_mono_ms() + GOS_HOLD_EXCHANGE_MS;
	ssize_t got = 0, n, rc = -1;
	int fd;

	if (!path || !trusted(path) || ll > GOS_HOLD_REQUEST_MAX)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path); /* trusted(): it fits */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		goto out;
	if (send(fd, line, ll, MSG_NOSIGNAL) != (ssize_t)ll)
		goto out;
	while (got < GOS_HOLD_ANSWER_MAX) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = end - gos_mono_ms();

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			goto out; /* no complete answer in time */
		n = read(fd, buf + got, GOS_HOLD_ANSWER_MAX - got);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			break; /* the answer is complete */
		got += n;
	}
	if (got >= GOS_HOLD_ANSWER_MAX)
		goto out; /* more than an answer can be */
	buf[got] = 0;
	rc = got;
out:
	close(fd);
	return rc;
}

int gos_hold_sampled(const char *path, long long since_ms)
{
	char buf[GOS_HOLD_ANSWER_MAX + 1];
	long long targets, at;

	if (gos_control_exchange(path, GOS_HOLD_QUESTION "\n", buf) <= 0)
		return 0; /* no answer (none yet, or no supervisor) */
	targets = field(buf, GOS_HOLD_TARGETS);
	at = field(buf, GOS_HOLD_SAMPLED_MS);
	if (targets == 0)
		return 2; /* no scrape target on the node: nothing to wait for */
	return targets > 0 && at >= since_ms;
}

int gos_hold_final(const char *path, int nodes)
{
	char buf[GOS_HOLD_ANSWER_MAX + 1], line[48];

	snprintf(line, sizeof(line), GOS_HOLD_FINAL " %d\n", nodes);
	return gos_control_exchange(path, line, buf) > 0 && !strcmp(buf, OK_LINE);
}

/* Whether s is a traceparent of version 00 (W3C trace-context): lower-case
 * hex, a trace id and a span id not all zeros. */
static int valid_traceparent(const char *s)
{
	int trace = 0, span = 0;

	if (strlen(s) != GOS_TRACEPARENT_LEN || strncmp(s, "00-", 3))
		return 0;
	for (int i = 3; i < GOS_TRACEPARENT_LEN; i++) {
		char c = s[i];

		if (i == 35 || i == 52) {
			if (c != '-')
				return 0;
			continue;
		}
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return 0;
		if (c != '0' && i < 35)
			trace = 1;
		if (c != '0' && i > 35 && i < 52)
			span = 1;
	}
	return trace && span;
}

int gos_control_step_start(const char *path, uint32_t step_id, long long start_ms,
			char traceparent[GOS_TRACEPARENT_LEN + 1])
{
	char line[96], buf[GOS_HOLD_ANSWER_MAX + 1];
	size_t n, ok = strlen(GOS_HOLD_OK);

	traceparent[0] = 0;
	snprintf(line, sizeof(line), GOS_HOLD_STEP_START " %u %lld\n", step_id, start_ms);
	if (gos_control_exchange(path, line, buf) <= 0 || strncmp(buf, GOS_HOLD_OK, ok))
		return -1;
	if (!strcmp(buf, OK_LINE))
		return 0;
	n = strlen(buf);
	if (n == ok + 1 + GOS_TRACEPARENT_LEN + 1 && buf[ok] == ' ' && buf[n - 1] == '\n') {
		buf[n - 1] = 0;
		if (valid_traceparent(buf + ok + 1)) {
			memcpy(traceparent, buf + ok + 1, GOS_TRACEPARENT_LEN + 1);
			return 0;
		}
	}
	return 1;
}

int gos_control_step_end(const char *path, const struct gos_control_step_end *e)
{
	char line[GOS_HOLD_REQUEST_MAX + 1], buf[GOS_HOLD_ANSWER_MAX + 1];

	snprintf(line, sizeof(line), GOS_HOLD_STEP_END " %u %lld %lld %lld %lld %d %d %d\n", e->step_id,
		 e->start_ms, e->end_ms, e->tasks_end_ms, e->final_end_ms, e->exit, e->signal, e->tasks);
	return gos_control_exchange(path, line, buf) > 0 && !strcmp(buf, OK_LINE) ? 0 : -1;
}
