/*
 * gym_otel.h: what the C front's files share. Internal to spank/.
 */
#ifndef GYM_OTEL_INTERNAL_H
#define GYM_OTEL_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>
#include <slurm/spank.h>

#define GOS_PREFIX "gym-otel: "

#define gos_error(fmt, ...) slurm_error(GOS_PREFIX fmt, ##__VA_ARGS__)
#define gos_info(fmt, ...) slurm_info(GOS_PREFIX fmt, ##__VA_ARGS__)
#define gos_debug(fmt, ...) slurm_debug(GOS_PREFIX fmt, ##__VA_ARGS__)

/* The constants C shares with the Go side, generated from it. */
#include "gym_otel_contract.h"

#define GOS_CORE_NAME "gym_otel_core.so"

/* args.c: plugstack.conf arguments. */
struct gos_args {
	int default_on;
	char *record_dir;
	char *core;
	char *joined; /* every argument, joined by '\n', for the Go core */
	char err[512]; /* the first problem, naming the argument */
};
int gos_args_parse(struct gos_args *a, int ac, char **av);
void gos_args_free(struct gos_args *a);
void gos_clean_path(char *p);

/* gym_otel.c: the option. */
struct gos_option {
	int given;   /* --gym-otel was seen (command line or SLURM_SPANK_* env) */
	char *value; /* its value, "" for a bare flag */
};
extern struct gos_option gos_opt;

/* core.c: the Go core, loaded on demand. Its functions' types come from
 * its one C header (include/gym_otel_core.h), which tests/packaging
 * compares with the header cgo generates from the core's exports. */
#include "gym_otel_core.h"

struct gos_core {
	void *handle;
	__typeof__(gym_otel_core_submit) *submit;
	__typeof__(gym_otel_core_prolog) *prolog;
	__typeof__(gym_otel_core_epilog) *epilog;
	__typeof__(gym_otel_core_free) *free;
};
int gos_core_open(const struct gos_args *a, struct gos_core *c);

/* record.c: root's record, read by the steps (pure C). */
struct gos_record {
	int ready;      /* status=ready */
	int fail;       /* on_failure=fail */
	char reason[1024];
	int final_wait; /* seconds, 0..GOS_MAX_FINAL_WAIT */
	long supervisor_pid; /* the job's supervisor on the node, 0 when none */
	unsigned long long supervisor_start; /* its start time, clock ticks since boot */
	int nenv;
	char **env;     /* "KEY=VALUE" */
	int nunset;
	char **unset;
	char dir[4096]; /* the job's record dir */
	char cgroup_memory[4096]; /* the collector cgroup's memory bound file, or "" */
	char cgroup_cpuset[4096]; /* the collector cgroup's cpuset.cpus, or "" */
	char hold_socket[64]; /* the supervisor's abstract socket for the hold, or "" */
};
/* 0: read; 1: no record; -1: a bad record (message in err). */
int gos_record_read(const char *record_dir, const char *node, uint32_t job_id,
		    struct gos_record *r, char *err, size_t errlen);
void gos_record_free(struct gos_record *r);
/* 1 when the record's supervisor still runs: /proc shows its pid with the
 * recorded start time, not a zombie. Pure C, one small read. */
int gos_supervisor_alive(const struct gos_record *r);
/* The n-th host of a Slurm hostlist. */
int gos_hostlist_nth(const char *list, unsigned n, char *buf, size_t len);
/* The node's name in a step, prolog or epilog. */
int gos_node_name(spank_t sp, char *buf, size_t len);

/* hold.c: the batch step's hold after the script's last line. */
long long gos_now_ms(void);
/* Asks the job's supervisor on its hold socket (the abstract unix socket
 * name from root's record; the listener must be pid sup_pid of uid): 1 when
 * it says every scrape target of the node has a sample stamped at or after
 * since_ms (unix ms), 2 when it says the node has no scrape target, else 0
 * (no answer, a listener that is not the supervisor, not yet). Bounded:
 * 250 ms at most, 256 bytes of answer. */
int gos_hold_sampled(const char *sock, pid_t sup_pid, uid_t uid, long long since_ms);
/* phase.c: the step's start and end, told to the supervisor (its spans). */
void gos_phase_step_start(spank_t sp, uint32_t job_id, uint32_t step_id, const struct gos_record *r);
void gos_phase_task_exit(spank_t sp);
void gos_phase_task_exit_done(void);
void gos_phase_step_end(void);

/* Per-context entry points. */
/* Outcomes of gos_bound_memory (bound.c). */
enum {
	GOS_BOUND_FAILED = -1, /* the bound could not be lowered (msg says why) */
	GOS_BOUND_KEPT = 0,    /* already at or below the job's memory */
	GOS_BOUND_LOWERED,     /* lowered at once */
	GOS_BOUND_STEPPED,     /* v1: lowered in steps after EBUSY, the kernel reclaimed */
	GOS_BOUND_KILLED,      /* v1: the group's processes killed, then lowered */
	GOS_BOUND_OOM,         /* v2: lowered; the kernel OOM-killed in the group */
};
int gos_bound_memory(const char *limit_file, unsigned long long want, char *msg, size_t len);

int gos_submit_init_post_opt(spank_t sp, struct gos_args *a, int args_ok);
int gos_step_init_post_opt(spank_t sp, struct gos_args *a);
int gos_step_task_init(spank_t sp);
int gos_step_task_post_fork(spank_t sp);
int gos_step_task_exit(spank_t sp);
void gos_step_exit(void);
int gos_job_prolog(spank_t sp, int ac, char **av);
int gos_job_epilog(spank_t sp, int ac, char **av);

#endif
