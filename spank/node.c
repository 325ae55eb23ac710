/*
 * node.c: which node a step, prolog or epilog runs on, as root's records
 * and Slurm name it, in pure C.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <slurm/slurm.h>

#include "node.h"

/*
 * The n-th host (0-based) of a Slurm hostlist such as "gn[1-3,07],login1"
 * into buf. One bracket group per name. Returns 0, or -1.
 */
int gos_hostlist_nth(const char *list, unsigned n, char *buf, size_t len)
{
	const char *p = list;

	while (*p) {
		const char *end = p, *open, *close;
		size_t itemlen;

		for (int depth = 0; *end && (depth || *end != ','); end++)
			depth += *end == '[' ? 1 : *end == ']' ? -1 : 0;
		itemlen = end - p;
		open = memchr(p, '[', itemlen);
		if (!open) {
			if (n == 0) {
				if (itemlen >= len)
					return -1;
				memcpy(buf, p, itemlen);
				buf[itemlen] = 0;
				return 0;
			}
			n--;
		} else {
			const char *r = open + 1;

			close = memchr(open, ']', end - open);
			if (!close || memchr(close, '[', end - close))
				return -1;
			while (r < close) {
				char *stop;
				unsigned long lo, hi;
				int width;

				lo = strtoul(r, &stop, 10);
				width = (int)(stop - r);
				if (width == 0)
					return -1;
				hi = lo;
				if (*stop == '-') {
					const char *h = stop + 1;

					hi = strtoul(h, &stop, 10);
					if (stop == h || hi < lo)
						return -1;
				}
				if (n <= hi - lo) {
					int w = snprintf(buf, len, "%.*s%0*lu%.*s", (int)(open - p), p,
							 width, lo + n, (int)(end - close - 1), close + 1);
					return w > 0 && (size_t)w < len ? 0 : -1;
				}
				n -= hi - lo + 1;
				if (*stop == ',')
					stop++;
				else if (stop != close)
					return -1;
				r = stop;
			}
		}
		p = *end ? end + 1 : end;
	}
	return -1;
}

/*
 * The node's name in a step. The task env may hold a stale SLURMD_NODENAME
 * (inherited from the batch step by an srun on another node), and
 * slurmstepd's own environ has none; srun sets SLURM_STEP_NODELIST for each
 * launch and S_JOB_NODEID is this node's place in it. The batch step has
 * no step node list: slurmd puts the right SLURMD_NODENAME in its env.
 */
int gos_node_name(spank_t sp, char *buf, size_t len)
{
	static char list[65536];
	uint32_t step_id, node_id;
	const char *e;

	if (spank_context() == S_CTX_REMOTE &&
	    spank_get_item(sp, S_JOB_STEPID, &step_id) == ESPANK_SUCCESS &&
	    step_id != SLURM_BATCH_SCRIPT &&
	    spank_get_item(sp, S_JOB_NODEID, &node_id) == ESPANK_SUCCESS &&
	    spank_getenv(sp, "SLURM_STEP_NODELIST", list, sizeof(list)) == ESPANK_SUCCESS)
		return gos_hostlist_nth(list, node_id, buf, len);
	if (spank_context() == S_CTX_REMOTE &&
	    spank_getenv(sp, "SLURMD_NODENAME", buf, (int)len) == ESPANK_SUCCESS && buf[0])
		return 0;
	e = getenv("SLURMD_NODENAME"); /* job_prolog/job_epilog: set by slurmd */
	if (e && *e && strlen(e) < len) {
		strcpy(buf, e);
		return 0;
	}
	return -1;
}

/*
 * This node's name as root's records know it: the one <record_dir>/<node>
 * that holds a record dir of this job. Not read from the job's environment
 * (SLURMD_NODENAME and SLURM_STEP_NODELIST are the user's, inherited by a
 * job submitted from inside another). Returns 0, or -1 when none or
 * several nodes have one (several slurmd on one host): then the caller
 * falls back to the environment.
 */
int gos_record_node(const char *record_dir, uint32_t job_id, char *buf, size_t len)
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

/*
 * The node's record dir <record_dir>/<node> into buf, made when missing
 * (0711): root's, a real directory, not writable by group or others, and
 * so is record_dir. A node name with a slash, "." or ".." is refused.
 * 0, or -1.
 */
int gos_node_name_safe(const char *node)
{
	return node[0] && !strchr(node, '/') && strcmp(node, ".") && strcmp(node, "..");
}

int gos_node_record_dir(const char *record_dir, const char *node, char *buf, size_t len)
{
	struct stat st;
	const char *dirs[2] = { record_dir, buf };

	if (!gos_node_name_safe(node))
		return -1;
	if ((size_t)snprintf(buf, len, "%s/%s", record_dir, node) >= len)
		return -1;
	for (int i = 0; i < 2; i++) {
		if (mkdir(dirs[i], 0711) && errno != EEXIST)
			return -1;
		if (lstat(dirs[i], &st) || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
		    (st.st_mode & (S_IWGRP | S_IWOTH)))
			return -1;
	}
	return 0;
}
