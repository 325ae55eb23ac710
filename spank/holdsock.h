/*
 * holdsock.h: root's exchanges with the job's supervisor on its hold
 * socket (holdsock.c, pure C): the batch step's question and final-scrape
 * request, and every step's phase lines (phase.c).
 */
#ifndef GYM_OTEL_HOLDSOCK_H
#define GYM_OTEL_HOLDSOCK_H

#include <sys/types.h>

/* At most this many bytes of an answer are read... */
#define GOS_HOLD_MAX 256
/* ...within this many milliseconds of the connect. */
#define GOS_HOLD_MS 250

/* One exchange with the job's supervisor on the hold socket at path (from
 * root's record): sends line, reads the whole answer into buf (NUL-ended).
 * The socket must be a socket owned by root in a directory owned by root
 * that neither group nor others can write (only root can have bound it:
 * the prolog's listener, which the supervisor serves). Returns the
 * answer's length, or -1: no such socket, no listener, no complete answer
 * within GOS_HOLD_MS, or GOS_HOLD_MAX bytes or more. */
ssize_t gos_hold_exchange(const char *path, const char *line, char buf[GOS_HOLD_MAX + 1]);

/* Asks the job's supervisor (gos_hold_exchange): 1 when it says every
 * scrape target of the node (of the job) has a sample stamped at or after
 * since_ms (unix ms), 2 when it says the node has no scrape target, else 0
 * (no answer, not yet). */
int gos_hold_sampled(const char *path, long long since_ms);

/* Tells the job's supervisor (gos_hold_exchange) that the batch script of
 * a job on nodes nodes has ended, so that it scrapes every target now (and
 * has the other nodes' supervisors do so): 1 when it answered "ok", else
 * 0. */
int gos_hold_final(const char *path, int nodes);

#endif
