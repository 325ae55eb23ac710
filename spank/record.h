/*
 * record.h: root's record of a job on a node, read by the steps in pure C
 * (record.c; the format is helper/record/record.go's).
 */
#ifndef GYM_OTEL_RECORD_H
#define GYM_OTEL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "gym_otel_contract.h"

struct gos_record {
	int ready;      /* status=ready */
	int starting;   /* status=starting: the prolog's start under way, or cut short */
	int fail;       /* on_failure=fail */
	char reason[1024];
	int final_wait; /* seconds, 0..GOS_MAX_FINAL_WAIT */
	long supervisor_pid; /* the job's supervisor on the node, 0 when none */
	unsigned long long supervisor_start; /* its start time, clock ticks since boot */
	int nenv;
	char **env;     /* "KEY=VALUE" */
	int nunset;
	char **unset;
	int nresattr;
	char **resattr; /* "key=<percent-encoded value>", for OTEL_RESOURCE_ATTRIBUTES */
	char dir[4096]; /* the job's record dir */
	char cgroup_memory[4096]; /* the collector cgroup's memory bound file, or "" */
	char cgroup_cpuset[4096]; /* the collector cgroup's cpuset.cpus, or "" */
	char control_socket[GOS_HOLD_PATH_MAX + 1]; /* the supervisor's control socket's path, or "" */
	char output_dir[4096]; /* the node's collector dir (absolute), or "" */
	char backend[2048];    /* the OTLP/HTTP base URL the collector ships to, or "" */
};
/* 0: read; 1: no record; -1: a bad record (message in err). */
int gos_record_read(const char *record_dir, const char *node, uint32_t job_id,
		    struct gos_record *r, char *err, size_t errlen);
/* Parses a record's text (modified in place) into r, whose dir the caller
 * sets: 0, or -1 (out of memory; message in err, r freed). */
int gos_record_parse(char *data, struct gos_record *r, char *err, size_t errlen);
void gos_record_free(struct gos_record *r);
/* 1 when the record's supervisor still runs: /proc shows its pid with the
 * recorded start time, not a zombie. Pure C, one small read. */
int gos_supervisor_alive(const struct gos_record *r);

#endif
