/*
 * holdsock.h: the batch step's question to the supervisor's hold socket
 * (holdsock.c, pure C).
 */
#ifndef GYM_OTEL_HOLDSOCK_H
#define GYM_OTEL_HOLDSOCK_H

#include <sys/types.h>

/* Asks the job's supervisor on its hold socket (the abstract unix socket
 * name from root's record; the listener must be pid sup_pid of uid): 1 when
 * it says every scrape target of the node has a sample stamped at or after
 * since_ms (unix ms), 2 when it says the node has no scrape target, else 0
 * (no answer, a listener that is not the supervisor, not yet). Bounded:
 * 250 ms at most, 256 bytes of answer. */
int gos_hold_sampled(const char *sock, pid_t sup_pid, uid_t uid, long long since_ms);

/* Tells the job's supervisor (the same checks and bounds) that the batch
 * script of a job on nodes nodes has ended, so that it scrapes every
 * target now (and has the other nodes' supervisors do so): 1 when it
 * answered "ok", else 0. */
int gos_hold_final(const char *sock, pid_t sup_pid, uid_t uid, int nodes);

#endif
