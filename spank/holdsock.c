/*
 * holdsock.c: the batch step's question to its node's supervisor on the
 * supervisor's hold socket (helper/supervise/holdsock.go), pure C in
 * slurmstepd: has every scrape target of the node a sample stamped at or
 * after the script's end? hold.c asks it in a one-node job and ends the
 * hold early on a yes. Before the first question, hold.c tells the
 * supervisor that the script has ended ("final"): the supervisor then
 * scrapes every target at once (helper/supervise/finalscrape.go) instead
 * of at each target's next interval.
 *
 * The socket is abstract (no file: nothing of the user's in root's
 * directories). The listener is trusted only when SO_PEERCRED names the
 * record's supervisor (its pid and the job's uid: a process that took the
 * name after the supervisor ended is not it), at most GOS_HOLD_MAX bytes
 * are read within GOS_HOLD_MS, and the answer is trusted no further than
 * ending the job's own hold early.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gym_otel_contract.h"
#include "holdsock.h"

#define GOS_HOLD_MAX 256
#define GOS_HOLD_MS 250

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
 * One exchange with the record's supervisor on its hold socket: sends
 * line, reads its whole answer into buf (at most GOS_HOLD_MAX bytes within
 * GOS_HOLD_MS). Returns the answer's length, or -1: no such listener, not
 * the record's supervisor (SO_PEERCRED: pid and uid), no complete answer
 * in time, or more than an answer can be.
 */
static ssize_t exchange(const char *sock, pid_t sup_pid, uid_t uid, const char *line,
			char buf[GOS_HOLD_MAX + 1])
{
	struct sockaddr_un a;
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	size_t nl = sock ? strlen(sock) : 0, ll = strlen(line);
	long long end = mono_ms() + GOS_HOLD_MS;
	ssize_t got = 0, n, rc = -1;
	int fd;

	if (nl == 0 || nl + 1 > sizeof(a.sun_path) || sup_pid <= 1)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	memcpy(a.sun_path + 1, sock, nl); /* abstract: a leading NUL */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + 1 + nl))
		goto out;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) || cr.pid != sup_pid || cr.uid != uid)
		goto out;
	if (send(fd, line, ll, MSG_NOSIGNAL) != (ssize_t)ll)
		goto out;
	while (got < GOS_HOLD_MAX) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long long left = end - mono_ms();

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			goto out; /* no complete answer in time */
		n = read(fd, buf + got, GOS_HOLD_MAX - got);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			break; /* the answer is complete */
		got += n;
	}
	if (got >= GOS_HOLD_MAX)
		goto out; /* more than an answer can be */
	buf[got] = 0;
	rc = got;
out:
	close(fd);
	return rc;
}

int gos_hold_sampled(const char *sock, pid_t sup_pid, uid_t uid, long long since_ms)
{
	char buf[GOS_HOLD_MAX + 1];
	long long targets, at;

	if (exchange(sock, sup_pid, uid, GOS_HOLD_QUESTION "\n", buf) <= 0)
		return 0; /* no answer (none yet, or not the supervisor's) */
	targets = field(buf, GOS_HOLD_TARGETS);
	at = field(buf, GOS_HOLD_SAMPLED_MS);
	if (targets == 0)
		return 2; /* no scrape target on the node: nothing to wait for */
	return targets > 0 && at >= since_ms;
}

int gos_hold_final(const char *sock, pid_t sup_pid, uid_t uid, int nodes)
{
	char buf[GOS_HOLD_MAX + 1], line[48];

	snprintf(line, sizeof(line), GOS_HOLD_FINAL " %d\n", nodes);
	return exchange(sock, sup_pid, uid, line, buf) > 0 && !strcmp(buf, "ok\n");
}
