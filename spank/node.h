/*
 * node.h: which node this is, as root's records and Slurm name it (node.c).
 */
#ifndef GYM_OTEL_NODE_H
#define GYM_OTEL_NODE_H

#include <stddef.h>
#include <stdint.h>
#include <slurm/spank.h>

/* The n-th host of a Slurm hostlist. 0, or -1. */
int gos_hostlist_nth(const char *list, unsigned n, char *buf, size_t len);
/* The node's name in a step, prolog or epilog, from Slurm. 0, or -1. */
int gos_node_name(spank_t sp, char *buf, size_t len);
/* The node's name as root's records know it: the one <record_dir>/<node>
 * holding a record dir of the job. 0, or -1 when none or several do. */
int gos_record_node(const char *record_dir, uint32_t job_id, char *buf, size_t len);

/* 1 when node is one path element under record_dir: not empty, no slash,
 * not "." or "..". */
int gos_node_name_safe(const char *node);
/* The node's record dir <record_dir>/<node>, made when missing: root's,
 * not writable by group or others. 0, or -1. */
int gos_node_record_dir(const char *record_dir, const char *node, char *buf, size_t len);

#endif
