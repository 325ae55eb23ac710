/*
 * step.c: every step of a job (remote context, slurmstepd), pure C: no Go
 * ever runs in a step process. Acts on root's record only, never on the
 * option, and never blocks long.
 *
 *   init_post_opt (slurmstepd parent): the task env from the record
 *   task_init (forked task child): fail the tasks when the collector
 *     failed and on_failure=fail (fails the job, never drains the node)
 *   task_exit (batch step): the final-scrape wait, at most 30 s of wall
 *     clock whatever slurmctld does, cut short when the job is cancelled
 *     or times out meanwhile, and in a one-node job once the supervisor
 *     says every target has a sample (hold.c)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "compat.h"
#include "gym_otel.h"

#define OWNED_ENV "GYM_OTEL_OWNED"
#define ENV_MAX 65536

static struct {
	int have; /* a record was read */
	int ready;
	int fail;
	int final_wait;
	int warn_user; /* this step made the job's warned marker: tell the user */
	int norecord;  /* the job asked, but this node has no record of it */
	uint32_t job_id;
	uint32_t step_id;
	char node[256];
	char reason[1024];
	char cpuset[4096]; /* the collector cgroup's cpuset.cpus, from the record */
	int cpuset_done;
	char kept[512]; /* telemetry variables set before the plugin, kept */
	char hold_socket[64]; /* the supervisor's hold socket (hold.c), or "" */
	long supervisor_pid;
} st;

/* FNV-1a, 32 bits: how GYM_OTEL_OWNED remembers a value the plugin set. */
static uint32_t fnv1a(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 16777619u;
	}
	return h;
}

/* Whether owned ("KEY:hash,...") says the plugin set key to a value of hash h. */
static int owned_by_us(const char *owned, const char *key, uint32_t h)
{
	size_t kl = strlen(key);
	char want[16];
	const char *p = owned;

	snprintf(want, sizeof(want), "%08x", h);
	while (p && *p) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);

		if (n == kl + 9 && !strncmp(p, key, kl) && p[kl] == ':' &&
		    !strncmp(p + kl + 1, want, 8))
			return 1;
		p = comma ? comma + 1 : NULL;
	}
	return 0;
}

static void apply_env(spank_t sp, const struct gos_record *r)
{
	static char cur[ENV_MAX], owned[ENV_MAX];
	char newowned[ENV_MAX] = "";
	size_t used = 0;

	if (spank_getenv(sp, OWNED_ENV, owned, sizeof(owned)) != ESPANK_SUCCESS)
		owned[0] = 0;
	for (int i = 0; i < r->nenv; i++) {
		char *kv = r->env[i];
		char *eq = strchr(kv, '=');
		const char *val = eq + 1;
		spank_err_t rc;

		*eq = 0;
		rc = spank_getenv(sp, kv, cur, sizeof(cur));
		if (rc == ESPANK_SUCCESS && !owned_by_us(owned, kv, fnv1a(cur))) {
			size_t kl = strlen(st.kept);

			gos_debug("job %u: %s is set by the user: kept", st.job_id, kv);
			snprintf(st.kept + kl, sizeof(st.kept) - kl, "%s%s", kl ? ", " : "", kv);
		} else if (rc == ESPANK_SUCCESS || rc == ESPANK_ENV_NOEXIST) {
			if (spank_setenv(sp, kv, val, 1) == ESPANK_SUCCESS) {
				int w = snprintf(newowned + used, sizeof(newowned) - used,
						 "%s%s:%08x", used ? "," : "", kv, fnv1a(val));
				if (w > 0 && (size_t)w < sizeof(newowned) - used)
					used += w;
			}
		}
		*eq = '=';
	}
	spank_setenv(sp, OWNED_ENV, newowned, 1);
}

/*
 * No record on this node: a value the plugin set on another node (the
 * batch step's env inherited by an srun here) points at that node's
 * loopback, so take it out; the user's own values stay.
 */
static void strip_foreign(spank_t sp)
{
	static char cur[ENV_MAX], owned[ENV_MAX];
	char *copy, *tok, *save;

	if (spank_getenv(sp, OWNED_ENV, owned, sizeof(owned)) != ESPANK_SUCCESS || !owned[0])
		return;
	copy = strdup(owned);
	for (tok = copy ? strtok_r(copy, ",", &save) : NULL; tok; tok = strtok_r(NULL, ",", &save)) {
		char *colon = strrchr(tok, ':');

		if (!colon)
			continue;
		*colon = 0;
		if (spank_getenv(sp, tok, cur, sizeof(cur)) == ESPANK_SUCCESS &&
		    owned_by_us(owned, tok, fnv1a(cur)))
			spank_unsetenv(sp, tok);
	}
	free(copy);
	spank_unsetenv(sp, OWNED_ENV);
}

/* With a proxy configured, make sure 127.0.0.1 (the collector) bypasses it. */
static void extend_no_proxy(spank_t sp)
{
	static const char *proxies[] = { "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY" };
	static const char *noproxies[] = { "no_proxy", "NO_PROXY" };
	static char cur[ENV_MAX], buf[ENV_MAX + 32];
	int any = 0;

	for (size_t i = 0; i < sizeof(proxies) / sizeof(*proxies); i++)
		if (spank_getenv(sp, proxies[i], cur, sizeof(cur)) == ESPANK_SUCCESS && cur[0])
			any = 1;
	if (!any)
		return;
	for (size_t i = 0; i < sizeof(noproxies) / sizeof(*noproxies); i++) {
		int has = spank_getenv(sp, noproxies[i], cur, sizeof(cur)) == ESPANK_SUCCESS && cur[0];
		char *tok, *save, *copy;
		int found = 0;

		if (has) {
			copy = strdup(cur);
			for (tok = copy ? strtok_r(copy, ", ", &save) : NULL; tok;
			     tok = strtok_r(NULL, ", ", &save))
				if (!strcmp(tok, "127.0.0.1"))
					found = 1;
			free(copy);
		}
		if (found)
			continue;
		snprintf(buf, sizeof(buf), "%s%s127.0.0.1", has ? cur : "", has ? "," : "");
		spank_setenv(sp, noproxies[i], buf, 1);
	}
}

/* Warn once per job and node (a marker created O_EXCL in the record dir). */
static void warn_once(const struct gos_record *r)
{
	char path[4200];
	int fd;

	snprintf(path, sizeof(path), "%s/warned", r->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	close(fd);
	st.warn_user = 1;
	gos_error("job %u: no collector on %s, the job runs without telemetry "
		  "(on_failure=continue): %s", st.job_id, st.node, r->reason);
}

/* Write v into the cgroup file path (root's, from root's record). */
static int write_cgroup(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, v, strlen(v));
	close(fd);
	return n == (ssize_t)strlen(v) ? 0 : -1;
}

/*
 * Bound the collector's cgroup by the job's memory on this node: the
 * prolog could only set the site's cap (Slurm tells a job's memory to its
 * steps, not to the job prolog). Lowers, never raises; a lowering the
 * kernel refuses is enforced, never ignored (bound.c), and the outcome is
 * logged. Runs in slurmstepd as root, before any task: the extern step's
 * (PrologFlags=Contain) is the first moment the job's memory is known.
 */
static void bound_collector_memory(spank_t sp, const struct gos_record *r)
{
	char msg[1024];
	uint64_t mb = 0;
	int rc;

	if (!r->cgroup_memory[0] || spank_get_item(sp, S_JOB_ALLOC_MEM, &mb) != ESPANK_SUCCESS || mb == 0)
		return;
	rc = gos_bound_memory(r->cgroup_memory, (unsigned long long)mb << 20, msg, sizeof(msg));
	switch (rc) {
	case GOS_BOUND_KEPT:
		return;
	case GOS_BOUND_LOWERED:
		gos_debug("job %u: the collector's cgroup is bounded by the job's memory, %llu MiB",
			  st.job_id, (unsigned long long)mb);
		return;
	case GOS_BOUND_STEPPED:
		gos_info("job %u: the collector's cgroup is bounded by the job's memory, %llu MiB: %s",
			 st.job_id, (unsigned long long)mb, msg);
		return;
	default:
		gos_error("job %u: bounding the collector's cgroup by the job's memory (%llu MiB, %s): %s",
			  st.job_id, (unsigned long long)mb, r->cgroup_memory, msg);
	}
}

/*
 * This node's name as root's records know it: the one <record_dir>/<node>
 * that holds a record dir of this job. Not read from the job's environment
 * (SLURMD_NODENAME and SLURM_STEP_NODELIST are the user's, inherited by a
 * job submitted from inside another). Returns 0, or -1 when none or
 * several nodes have one (several slurmd on one host): then the caller
 * falls back to the environment.
 */
static int record_node(const char *record_dir, uint32_t job_id, char *buf, size_t len)
{
	DIR *d = opendir(record_dir);
	struct dirent *e;
	struct stat sb;
	char path[4200];
	int found = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) && found < 2) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/%u", record_dir, e->d_name, job_id);
		if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && strlen(e->d_name) < len) {
			if (!found)
				snprintf(buf, len, "%s", e->d_name);
			found++;
		}
	}
	closedir(d);
	return found == 1 ? 0 : -1;
}

int gos_step_init_post_opt(spank_t sp, struct gos_args *a)
{
	struct gos_record r;
	char err[512], jobbuf[16];
	int rc;

	memset(&st, 0, sizeof(st));
	if (spank_get_item(sp, S_JOB_ID, &st.job_id) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_STEPID, &st.step_id) != ESPANK_SUCCESS)
		return 0;
	if (st.step_id == SLURM_EXTERN_CONT) {
		/* The CPU set (the extern step's are the job's on the node) and
		 * the memory bound, nothing else. */
		if (!record_node(a->record_dir, st.job_id, st.node, sizeof(st.node)) ||
		    !gos_node_name(sp, st.node, sizeof(st.node))) {
			struct gos_record r;

			if (gos_record_read(a->record_dir, st.node, st.job_id, &r, err, sizeof(err)) == 0) {
				if (r.ready) {
					snprintf(st.cpuset, sizeof(st.cpuset), "%s", r.cgroup_cpuset);
					bound_collector_memory(sp, &r);
					if (gos_supervisor_alive(&r))
						gos_phase_step_start(sp, st.job_id, st.step_id, &r);
				}
				gos_record_free(&r);
			}
		}
		return 0;
	}
	if (record_node(a->record_dir, st.job_id, st.node, sizeof(st.node)) &&
	    gos_node_name(sp, st.node, sizeof(st.node))) {
		gos_debug("job %u: no SLURMD_NODENAME in the step", st.job_id);
		return 0;
	}
	rc = gos_record_read(a->record_dir, st.node, st.job_id, &r, err, sizeof(err));
	if (rc == 1) {
		/* No collector for this job on this node. */
		strip_foreign(sp);
		if (spank_getenv(sp, "SLURM_SPANK_GYM_OTEL_SPEC", err, sizeof(err)) != ESPANK_ENV_NOEXIST) {
			st.norecord = 1;
			gos_error("job %u: the job asked for a collector but node %s has "
				  "no record of it: the job prolog did not start one here "
				  "(PrologFlags=Alloc missing in slurm.conf, slurmd not "
				  "restarted after installing the plugin, or the prolog "
				  "failed: see slurmd's log)", st.job_id, st.node);
		}
		return 0;
	}
	if (rc < 0) {
		gos_error("job %u: %s", st.job_id, err);
		return 0;
	}
	if (r.ready && !gos_supervisor_alive(&r)) {
		/*
		 * The supervisor has ended mid-job: it gave up on its collector
		 * (restarted too often, or its ports were taken by another
		 * process). Nothing answering on the recorded ports is the
		 * job's any more: this step gets no collector env, and values
		 * the plugin set in an earlier step (the batch script's) go.
		 */
		r.ready = 0;
		snprintf(r.reason, sizeof(r.reason), "the job's collector on %s stopped mid-job "
			 "(its supervisor, pid %ld, has ended: see supervisor.log in the job's "
			 "output dir)", st.node, r.supervisor_pid);
		strip_foreign(sp);
	}
	st.have = 1;
	st.ready = r.ready;
	st.fail = r.fail;
	st.final_wait = r.final_wait;
	snprintf(st.reason, sizeof(st.reason), "%s", r.reason);
	snprintf(st.hold_socket, sizeof(st.hold_socket), "%s", r.hold_socket);
	st.supervisor_pid = r.supervisor_pid;
	gos_phase_step_start(sp, st.job_id, st.step_id, &r);

	/* The nesting marker: an srun in this job does not submit again. */
	snprintf(jobbuf, sizeof(jobbuf), "%u", st.job_id);
	spank_setenv(sp, GOS_ENV_IN_JOB, jobbuf, 1);
	for (int i = 0; i < r.nunset; i++)
		spank_unsetenv(sp, r.unset[i]);
	if (r.ready) {
		snprintf(st.cpuset, sizeof(st.cpuset), "%s", r.cgroup_cpuset);
		bound_collector_memory(sp, &r);
		apply_env(sp, &r);
		extend_no_proxy(sp);
		if (st.kept[0])
			gos_info("job %u step %u: %s already set, kept over the collector's values",
				 st.job_id, st.step_id, st.kept);
	} else if (!r.fail) {
		warn_once(&r);
	}
	gos_record_free(&r);
	return 0;
}

/* Parse a cpulist ("0-3,8,10-11") into set; 0, or -1. */
static int parse_cpulist(const char *s, cpu_set_t *set)
{
	CPU_ZERO(set);
	while (*s && *s != '\n') {
		char *end;
		unsigned long lo = strtoul(s, &end, 10), hi;

		if (end == s)
			return -1;
		hi = lo;
		if (*end == '-') {
			s = end + 1;
			hi = strtoul(s, &end, 10);
			if (end == s || hi < lo)
				return -1;
		}
		for (unsigned long c = lo; c <= hi && c < CPU_SETSIZE; c++)
			CPU_SET(c, set);
		s = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* Format set as a cpulist into buf. */
static void format_cpulist(const cpu_set_t *set, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = 0;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		int e = c;

		if (!CPU_ISSET(c, set))
			continue;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
			e++;
		used += snprintf(buf + used, len > used ? len - used : 0, "%s%d", used ? "," : "", c);
		if (e > c)
			used += snprintf(buf + used, len > used ? len - used : 0, "-%d", e);
		c = e;
	}
}

/*
 * The collector's CPU set follows the job's on this node: after the first
 * task of each step is forked, slurmstepd sits in the step's cgroup with
 * the step's CPUs (task/cgroup, ConstrainCores); the collector's cgroup
 * gets those CPUs, widened by every later step's (the union of the job's
 * steps, never beyond the job's CPUs). The extern step's CPUs, with
 * PrologFlags=Contain, are all of the job's. Where Slurm binds nothing the
 * affinity is every CPU and nothing changes. Plain C, as root; never fails.
 */
int gos_step_task_post_fork(spank_t sp)
{
	cpu_set_t mine, cur, all;
	char buf[4096], out[4096];
	int fd, n;

	(void)sp;
	if (st.cpuset_done || !st.cpuset[0])
		return 0;
	st.cpuset_done = 1;
	if (sched_getaffinity(0, sizeof(mine), &mine))
		return 0;
	CPU_ZERO(&all);
	for (long c = 0, on = sysconf(_SC_NPROCESSORS_CONF); c < on && c < CPU_SETSIZE; c++)
		CPU_SET(c, &all);
	CPU_AND(&mine, &mine, &all);
	if (CPU_EQUAL(&mine, &all) || CPU_COUNT(&mine) == 0)
		return 0; /* not bound by Slurm */
	fd = open(st.cpuset, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	if (parse_cpulist(buf, &cur))
		return 0;
	CPU_AND(&cur, &cur, &all);
	if (!CPU_EQUAL(&cur, &all))
		CPU_OR(&mine, &mine, &cur); /* an earlier step narrowed it: widen */
	if (CPU_EQUAL(&mine, &cur))
		return 0;
	format_cpulist(&mine, out, sizeof(out));
	if (write_cgroup(st.cpuset, out))
		gos_error("job %u: the collector's CPU set (%s to %s): %s", st.job_id, out, st.cpuset, strerror(errno));
	else
		gos_debug("job %u: the collector's CPUs are now %s", st.job_id, out);
	return 0;
}

int gos_step_task_init(spank_t sp)
{
	uint32_t rank = 1;

	if (st.norecord) {
		/*
		 * The job asked for a collector but this node's prolog started
		 * none: tell the user on the first local task's stderr of each
		 * step (the reason is in slurmd's log).
		 */
		if (spank_get_item(sp, S_TASK_ID, &rank) == ESPANK_SUCCESS && rank == 0)
			dprintf(STDERR_FILENO, GOS_PREFIX "warning: the job asked for a collector "
				"but node %s has none, this step runs without telemetry "
				"(the cause is in slurmd's log on %s)\n", st.node, st.node);
		return 0;
	}
	if (st.have && st.ready && st.kept[0]) {
		/*
		 * The step carries its own OTel settings beside the collector's,
		 * as the driver's srun line of a Gym that still renders its own
		 * collector step does: say so once per step, on task 0's stderr.
		 */
		if (spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) == ESPANK_SUCCESS && rank == 0)
			dprintf(STDERR_FILENO, GOS_PREFIX "warning: job %u: %s already set for this "
				"step, kept, so they win over this job's collector (a Gym that "
				"still renders its own collector step sets them on the driver's "
				"srun line: drop them when the script carries --gym-otel)\n",
				st.job_id, st.kept);
		return 0;
	}
	if (!st.have || st.ready)
		return 0;
	if (!st.fail) {
		/*
		 * on_failure=continue: the user learns it once per job, on the
		 * first task's stderr (the forked task: plain C, write(2) only).
		 */
		if (st.warn_user && spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) == ESPANK_SUCCESS &&
		    rank == 0)
			dprintf(STDERR_FILENO, GOS_PREFIX "warning: no collector on %s, this job runs "
				"without telemetry (on_failure=continue): %s\n", st.node, st.reason);
		return 0;
	}
	slurm_error(GOS_PREFIX "job %u: the collector on %s failed to start "
		    "(on_failure=fail): %s", st.job_id, st.node, st.reason);
	return -1;
}

/*
 * Whether slurmctld says the job is over or ending (scancel, a time limit
 * during the final wait). One RPC; an unanswered one is "not ended".
 */
static int job_ending(uint32_t job_id)
{
	job_info_msg_t *msg = NULL;
	uint32_t state;
	int ending = 0;

	if (gos_load_job(&msg, job_id, SHOW_LOCAL) != SLURM_SUCCESS || !msg)
		return 0;
	if (msg->record_count > 0) {
		state = msg->job_array[0].job_state;
		ending = (state & JOB_COMPLETING) || (state & JOB_STATE_BASE) > JOB_SUSPENDED;
	}
	slurm_free_job_info_msg(msg);
	return ending;
}

/* Monotonic milliseconds. */
static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Whether the job has one node (SLURM_JOB_NUM_NODES of the batch env, set
 * by Slurm) and the job's uid: only then can the hold end early (hold.c).
 */
static int one_node(spank_t sp, uid_t *uid)
{
	char buf[32];

	if (spank_get_item(sp, S_JOB_UID, uid) != ESPANK_SUCCESS)
		return 0;
	if (spank_getenv(sp, "SLURM_JOB_NUM_NODES", buf, sizeof(buf)) != ESPANK_SUCCESS &&
	    spank_getenv(sp, "SLURM_NNODES", buf, sizeof(buf)) != ESPANK_SUCCESS)
		return 0;
	return !strcmp(buf, "1");
}

/*
 * The final-scrape wait, bounded in wall-clock time whatever slurmctld
 * does: once a second a forked child asks whether the job is ending
 * (job_ending), and the wait never blocks on it. A child that has not
 * answered by the wait's end (a controller failing over, MessageTimeout
 * retries) is killed and reaped; no second one is started meanwhile. A
 * step callback blocked past a scancel would arm Slurm's unkillable-step
 * timeout, which drains the node: this callback returns at its deadline.
 * In a one-node job (one), the wait also ends once the node's collector
 * says every target has a sample after the script's end (hold.c).
 */
static void final_wait(uint32_t job_id, int seconds, int one, uid_t uid)
{
	long long start = now_ms(), end = start + (long long)seconds * 1000, next = start + 1000;
	long long since = gos_now_ms(); /* wall clock, as the samples are stamped */
	struct timespec slice = { 0, 100 * 1000 * 1000 };
	const char *why = NULL;
	pid_t child = -1;
	int status, sampled;

	while (!why && now_ms() < end) {
		nanosleep(&slice, NULL);
		if (one && (sampled = gos_hold_sampled(st.hold_socket, (pid_t)st.supervisor_pid, uid, since))) {
			gos_info("job %u: %s %s%s: final-scrape wait ended after %lld ms", job_id,
				 sampled == 2 ? "no scrape target on" : "every target on", st.node,
				 sampled == 2 ? "" : " has a sample after the script's last line",
				 now_ms() - start);
			why = "sampled";
			break;
		}
		if (child > 0 && waitpid(child, &status, WNOHANG) == child) {
			child = -1;
			if (WIFEXITED(status) && WEXITSTATUS(status) == 1) {
				gos_info("job %u: the job is ending (cancelled or out of time): "
					 "final-scrape wait cut short after %lld ms", job_id, now_ms() - start);
				why = "ending";
				break;
			}
		}
		if (child < 0 && now_ms() >= next && now_ms() < end - 500) {
			next = now_ms() + 1000;
			child = fork();
			if (child == 0)
				_exit(job_ending(job_id) ? 1 : 0);
		}
	}
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
		if (!why)
			gos_info("job %u: final-scrape wait done after %lld ms (slurmctld did not answer the last query)",
				 job_id, now_ms() - start);
		return;
	}
	if (!why)
		gos_info("job %u: final-scrape wait done after %lld ms", job_id, now_ms() - start);
}

int gos_step_task_exit(spank_t sp)
{
	int status = 0, one;
	uid_t uid = 0;

	if (!st.have || !st.ready || st.step_id != SLURM_BATCH_SCRIPT || st.final_wait <= 0)
		return 0;
	if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS ||
	    !WIFEXITED(status))
		return 0; /* signalled (scancel, time limit): no wait */
	one = one_node(sp, &uid);
	gos_info("job %u: batch script done, waiting %d s for the collector's final scrape%s",
		 st.job_id, st.final_wait, one ? " (less once every target has a sample)" : "");
	final_wait(st.job_id, st.final_wait, one, uid);
	return 0;
}

void gos_step_exit(void)
{
	memset(&st, 0, sizeof(st));
}
