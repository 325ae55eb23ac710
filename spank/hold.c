/*
 * hold.c: how long the batch step holds the job after the script's last
 * line (task_exit), pure C in slurmstepd.
 *
 * The hold is one scrape interval and a second (the record's final_wait,
 * at most GOS_MAX_FINAL_WAIT): with every target scraped every interval
 * from the collector's start, that window holds a scrape of every target
 * on every node while the job's services are still alive. It is cut short
 * when the job is cancelled or times out meanwhile, and once the batch
 * node's supervisor says every target (on every node) has a sample
 * stamped at or after the script's end (controlsock.c). The step first tells
 * the supervisor that the script has ended (gos_hold_final, with the job's
 * node count): it scrapes every target at once, and the samples are in
 * the files within about a second, not the next interval. Other nodes'
 * supervisors are not reachable from here: in a job on several nodes the
 * batch node's supervisor asks them (helper/supervise/peers.go) and says
 * yes only once every node has its samples; where it cannot reach them
 * the job holds the full window.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "clock.h"
#include "compat.h"
#include "hold.h"
#include "controlsock.h"
#include "log.h"

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

/*
 * The job's node count (SLURM_JOB_NUM_NODES of the batch env, set by
 * Slurm); 0 when unknown: then the hold waits its bound without asking
 * the supervisor.
 */
static int job_nodes(spank_t sp)
{
	char buf[32], *end;
	long n;

	if (spank_getenv(sp, "SLURM_JOB_NUM_NODES", buf, sizeof(buf)) != ESPANK_SUCCESS &&
	    spank_getenv(sp, "SLURM_NNODES", buf, sizeof(buf)) != ESPANK_SUCCESS)
		return 0;
	n = strtol(buf, &end, 10);
	if (end == buf || *end || n < 1 || n > 100000)
		return 0;
	return (int)n;
}

/*
 * The final-scrape wait, bounded in wall-clock time whatever slurmctld
 * does: once a second a forked child asks whether the job is ending
 * (job_ending), and the wait never blocks on it. A child that has not
 * answered by the wait's end (a controller failing over, MessageTimeout
 * retries) is killed and reaped; no second one is started meanwhile. A
 * step callback blocked past a scancel would arm Slurm's unkillable-step
 * timeout, which drains the node: this callback returns at its deadline.
 * With the job's node count known (nodes), the supervisor is first asked
 * for the final scrape now, and the wait ends once it says every target
 * (on every node) has a sample after the script's end (controlsock.c).
 */
static void final_wait(uint32_t job_id, int seconds, int nodes, const char *node, const char *control_socket)
{
	long long start = gos_mono_ms(), end = start + (long long)seconds * 1000, next = start + 1000;
	long long since = gos_now_ms();
	struct timespec slice = { 0, 100 * 1000 * 1000 };
	const char *why = NULL;
	pid_t child = -1;
	int status, sampled;

	if (nodes && !gos_hold_final(control_socket, nodes))
		gos_info("job %u: the supervisor on %s did not take the final-scrape request: "
			 "waiting for every target's next scrape", job_id, node);
	while (!why && gos_mono_ms() < end) {
		nanosleep(&slice, NULL);
		if (nodes && (sampled = gos_hold_sampled(control_socket, since))) {
			gos_info("job %u: %s %s%s: final-scrape wait ended after %lld ms", job_id,
				 sampled == 2 ? "no scrape target on" : "every target on", nodes > 1 ? "every node" : node,
				 sampled == 2 ? "" : " has a sample after the script's last line",
				 gos_mono_ms() - start);
			why = "sampled";
			break;
		}
		if (child > 0 && waitpid(child, &status, WNOHANG) == child) {
			child = -1;
			if (WIFEXITED(status) && WEXITSTATUS(status) == 1) {
				gos_info("job %u: the job is ending (cancelled or out of time): "
					 "final-scrape wait cut short after %lld ms", job_id, gos_mono_ms() - start);
				why = "ending";
				break;
			}
		}
		if (child < 0 && gos_mono_ms() >= next && gos_mono_ms() < end - 500) {
			next = gos_mono_ms() + 1000;
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
				 job_id, gos_mono_ms() - start);
		return;
	}
	if (!why)
		gos_info("job %u: final-scrape wait done after %lld ms", job_id, gos_mono_ms() - start);
}

void gos_hold(spank_t sp, uint32_t job_id, int seconds, const char *node, const char *control_socket)
{
	int status = 0, nodes;

	if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS ||
	    !WIFEXITED(status))
		return; /* signalled (scancel, time limit): no wait */
	nodes = control_socket[0] ? job_nodes(sp) : 0;
	gos_info("job %u: batch script done, waiting %d s for the collector's final scrape%s",
		 job_id, seconds, nodes ? " (less once every target has a sample)" : "");
	final_wait(job_id, seconds, nodes, node, control_socket);
}
