/*
 * bound.c: lowering the collector cgroup's memory bound to the job's memory
 * on the node, from a step (slurmstepd, as root; pure C, no Slurm calls, so
 * that a test can drive it on a real hierarchy).
 *
 * cgroup v1 refuses a bound below what the group holds (EBUSY) once the
 * kernel cannot reclaim enough. That is never ignored: the bound is
 * lowered in steps (each write makes the kernel reclaim again; pages under
 * writeback become reclaimable meanwhile), and when the group still holds
 * more than the job's memory its processes are killed and the bound is
 * written on the emptied group. memory.force_empty is not used: it is for
 * a group with no process left, and on a live group it only reclaims what
 * the stepped writes already try to. On cgroup v2 the kernel reclaims and
 * then OOM-kills inside the group by itself; the kills are counted
 * (memory.events) and reported.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bound.h"

#define MIB(b) ((b) >> 20)

static int read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return 0;
}

/* An unsigned number file ("max" reads as 0); 0 on error too. */
static unsigned long long read_ull(const char *path)
{
	char buf[64];

	if (read_text(path, buf, sizeof(buf)))
		return 0;
	return strtoull(buf, NULL, 10);
}

/* Write v to path; 0, or -1 with errno. */
static int write_ull(const char *path, unsigned long long v)
{
	char buf[32];
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC), saved;
	ssize_t n;

	if (fd < 0)
		return -1;
	snprintf(buf, sizeof(buf), "%llu", v);
	n = write(fd, buf, strlen(buf));
	saved = errno;
	close(fd);
	errno = saved;
	return n == (ssize_t)strlen(buf) ? 0 : -1;
}

/* The value of "key N" in a flat-keyed file (memory.events). */
static long long keyed(const char *path, const char *key)
{
	char buf[4096], *p;
	size_t kl = strlen(key);

	if (read_text(path, buf, sizeof(buf)))
		return 0;
	for (p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, key, kl) && p[kl] == ' ')
			return strtoll(p + kl + 1, NULL, 10);
	return 0;
}

static void pause_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * SIGKILL every process listed in procs (a cgroup.procs file) until none
 * is left, at most about 2 s. Returns how many processes it found (each
 * counted once, up to 4096).
 */
static int kill_all(const char *procs)
{
	static long found[4096];
	int nfound = 0;

	for (int round = 0; round < 200; round++) {
		char buf[65536], *p, *end;
		int seen = 0;

		if (read_text(procs, buf, sizeof(buf)))
			break;
		for (p = buf; *p; p = end) {
			long pid = strtol(p, &end, 10);
			int known = 0;

			if (end == p)
				break;
			if (pid <= 1)
				continue;
			seen++;
			kill((pid_t)pid, SIGKILL);
			for (int i = 0; i < nfound && !known; i++)
				known = found[i] == pid;
			if (!known && nfound < (int)(sizeof(found) / sizeof(found[0])))
				found[nfound++] = pid;
		}
		if (!seen)
			break;
		pause_ms(10);
	}
	return nfound;
}

static void say(char *msg, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
}

int gos_bound_memory(const char *limit_file, unsigned long long want, char *msg, size_t len)
{
	static const char v1tail[] = "memory.limit_in_bytes", v2tail[] = "memory.max";
	char dir[4096], f[4200];
	size_t pl = strlen(limit_file);
	unsigned long long cur, usage, step;
	int v1, steps = 0, killed;

	msg[0] = 0;
	if (pl > strlen(v1tail) && !strcmp(limit_file + pl - strlen(v1tail), v1tail))
		v1 = 1;
	else if (pl > strlen(v2tail) && !strcmp(limit_file + pl - strlen(v2tail), v2tail))
		v1 = 0;
	else {
		say(msg, len, "%s is not a memory bound file", limit_file);
		return GOS_BOUND_FAILED;
	}
	if (pl - (v1 ? strlen(v1tail) : strlen(v2tail)) >= sizeof(dir)) {
		say(msg, len, "%s: path too long", limit_file);
		return GOS_BOUND_FAILED;
	}
	snprintf(dir, sizeof(dir), "%.*s", (int)(pl - (v1 ? strlen(v1tail) : strlen(v2tail))), limit_file);
	cur = read_ull(limit_file); /* "max" (v2) reads as 0: no bound yet */
	if (cur && cur <= want)
		return GOS_BOUND_KEPT;

	if (!v1) {
		long long before, after;

		snprintf(f, sizeof(f), "%smemory.events", dir);
		before = keyed(f, "oom_kill");
		if (write_ull(limit_file, want)) {
			say(msg, len, "writing %llu to %s: %s", want, limit_file, strerror(errno));
			return GOS_BOUND_FAILED;
		}
		after = keyed(f, "oom_kill");
		if (after > before) {
			say(msg, len, "the kernel OOM-killed %lld processes of the group to bring it under the job's %llu MiB",
			    after - before, MIB(want));
			return GOS_BOUND_OOM;
		}
		return GOS_BOUND_LOWERED;
	}

	snprintf(f, sizeof(f), "%smemory.usage_in_bytes", dir);
	usage = read_ull(f);
	if (write_ull(limit_file, want) == 0)
		goto memsw;
	if (errno != EBUSY) {
		say(msg, len, "writing %llu to %s: %s", want, limit_file, strerror(errno));
		return GOS_BOUND_FAILED;
	}
	/* In steps from what it holds down to the job's memory. */
	if (!cur || cur > usage)
		cur = usage;
	for (int i = 1; i <= 8 && cur > want; i++) {
		step = cur - (cur - want) * i / 8;
		if (write_ull(limit_file, step))
			break;
		steps++;
	}
	if (steps == 8 || write_ull(limit_file, want) == 0) {
		say(msg, len, "the group held %llu MiB, above the job's %llu MiB: the kernel reclaimed it in %d steps",
		    MIB(usage), MIB(want), steps);
		goto memsw_stepped;
	}
	/* The kernel cannot reclaim it: end the group's processes. */
	snprintf(f, sizeof(f), "%scgroup.procs", dir);
	killed = kill_all(f);
	for (int i = 0; i < 200; i++) {
		if (write_ull(limit_file, want) == 0) {
			say(msg, len, "the group held %llu MiB, above the job's %llu MiB, and the kernel could not reclaim it "
				      "(EBUSY after %d steps): killed its %d processes (no collector on this node for the rest of the job)",
			    MIB(usage), MIB(want), steps, killed);
			snprintf(f, sizeof(f), "%smemory.memsw.limit_in_bytes", dir);
			if (access(f, F_OK) == 0)
				write_ull(f, want);
			return GOS_BOUND_KILLED;
		}
		pause_ms(10);
	}
	say(msg, len, "the group held %llu MiB, above the job's %llu MiB; killed %d processes, and the bound is still refused: %s",
	    MIB(usage), MIB(want), killed, strerror(errno));
	return GOS_BOUND_FAILED;

memsw:
	snprintf(f, sizeof(f), "%smemory.memsw.limit_in_bytes", dir);
	if (access(f, F_OK) == 0 && write_ull(f, want)) {
		say(msg, len, "writing %llu to %s: %s", want, f, strerror(errno));
		return GOS_BOUND_FAILED;
	}
	return GOS_BOUND_LOWERED;
memsw_stepped:
	snprintf(f, sizeof(f), "%smemory.memsw.limit_in_bytes", dir);
	if (access(f, F_OK) == 0 && write_ull(f, want)) {
		say(msg, len, "the memory bound is lowered, but writing %llu to %s: %s", want, f, strerror(errno));
		return GOS_BOUND_FAILED;
	}
	return GOS_BOUND_STEPPED;
}
