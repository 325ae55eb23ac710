// The collector's early exec (early.c): what the constructor leaves for
// the Go side (early.go).
#ifndef GOS_EARLY_H
#define GOS_EARLY_H

// launch.EnvEarlyCollector, launch.EnvHandover and render.ConfigEnv (a
// test holds them equal).
#define GOS_EARLY_COLLECTOR_ENV "GYM_OTEL_EARLY_COLLECTOR"
#define GOS_EARLY_HANDOVER_ENV "GYM_OTEL_HANDOVER_FD"
#define GOS_EARLY_CONFIG_ENV "GYM_OTEL_COLLECTOR_CONFIG"

// The collector's pid and this process's end of the hand-over socket,
// -1 when none was exec'd; errno of a failed socketpair or fork, else 0.
// The binary exec'd is GOS_EARLY_COLLECTOR_ENV's value, which the Go side
// reads from the same environment.
extern int gos_early_pid;
extern int gos_early_fd;
extern int gos_early_errno;

#endif
