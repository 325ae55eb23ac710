/*
 * hold.c: how long the batch step holds the job after the script's last
 * line (task_exit), pure C in slurmstepd.
 *
 * The hold is one scrape interval and a second (the record's final_wait):
 * with every target scraped every interval from the collector's start,
 * that window holds a scrape of every target on every node while the
 * job's services are still alive. In a one-node job the step can learn
 * from its own node's collector that the sample was taken: the supervisor
 * keeps the sampled hint (lifecycle.SampledFile) beside root's record, and
 * the hold ends once it says every target has a sample stamped at or
 * after the script's end. Other nodes' collectors have no such channel,
 * so a multi-node job holds the full window.
 *
 * The hint is the job user's file in root's directory: opened with
 * O_NOFOLLOW and O_NONBLOCK, used only when it is a regular file owned by
 * the job's uid, at most GOS_HOLD_MAX bytes read, and trusted no further
 * than ending the job's own hold early.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gym_otel.h"

#define GOS_HOLD_MAX 256

long long gos_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
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

int gos_hold_sampled(const char *dir, uid_t uid, long long since_ms)
{
	char path[4200], buf[GOS_HOLD_MAX + 1];
	struct stat sb;
	long long targets, at;
	ssize_t n;
	int fd;

	if (snprintf(path, sizeof(path), "%s/" GOS_SAMPLED_FILE, dir) >= (int)sizeof(path))
		return 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_uid != uid) {
		close(fd);
		return 0;
	}
	n = pread(fd, buf, GOS_HOLD_MAX, 0);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	targets = field(buf, "targets");
	at = field(buf, "sampled_ms");
	if (targets == 0)
		return 2; /* no scrape target on the node: nothing to wait for */
	return targets > 0 && at >= since_ms;
}
