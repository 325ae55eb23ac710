// The collector's early exec: `gym-otel-spank supervise` started with
// GYM_OTEL_EARLY_COLLECTOR in its environment (by the plugin's prolog, as
// `supervise --from-env`) execs the host collector at its very
// start, before the Go runtime exists, so that the collector's own
// initialisation (most of its start) overlaps the supervisor's. See
// early.go and launch.EnvEarlyCollector.
//
// It runs as an ELF constructor, as runc's nsenter does: before the Go
// runtime has started a thread, so the fork copies one thread and the
// child may do anything before its exec.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "early.h"

int gos_early_pid = -1;
int gos_early_fd = -1;
int gos_early_errno = 0;

// The collector's argv after its binary: its configuration by content,
// from the environment the hand-over gives it (render.ConfigEnv; a test
// holds the two equal).
static char config_flag[] = "--config";
static char config_arg[] = "env:" GOS_EARLY_CONFIG_ENV;
static char handover_env[] = GOS_EARLY_HANDOVER_ENV "=3";
// The collector's package initialisation without garbage collection (it
// allocates about 5 MiB, which Go's default collects twice): 8 ms less of
// its start on a slow host. Its collector after the hand-over is set by
// collector/startgc.go from the environment handed over, as for one
// exec'd with it.
static char gogc_off[] = "GOGC=off";

// child is the forked process: its own session, SIGTERM at this
// process's death, a clean signal mask and no ignored signal, the
// hand-over socket as descriptor 3 beside the standard three and no other
// descriptor, then the collector with nothing but EnvHandover and
// GOGC=off in its environment. It never returns.
static void child(const char *bin, int sock, pid_t parent)
{
	sigset_t none;
	char *argv[] = {(char *)bin, config_flag, config_arg, NULL};
	char *envp[] = {handover_env, gogc_off, NULL};

	if (setsid() < 0 || prctl(PR_SET_PDEATHSIG, SIGTERM) != 0)
		_exit(127);
	if (getppid() != parent)
		_exit(0);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int s = 1; s < NSIG; s++) {
		struct sigaction sa;
		if (s == SIGKILL || s == SIGSTOP)
			continue;
		if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
			signal(s, SIG_DFL);
	}
	if (sock != 3) {
		if (dup2(sock, 3) != 3)
			_exit(127);
	} else if (fcntl(3, F_SETFD, 0) != 0) {
		_exit(127);
	}
#ifdef SYS_close_range
	if (syscall(SYS_close_range, 4U, ~0U, 0U) != 0)
#endif
	{
		long max = sysconf(_SC_OPEN_MAX);
		if (max < 0 || max > 65536)
			max = 65536;
		for (int fd = 4; fd < max; fd++)
			close(fd);
	}
	execve(bin, argv, envp);
	_exit(127);
}

__attribute__((constructor)) static void gos_early_exec(int argc, char **argv, char **envp)
{
	(void)envp;
	if (argc < 2 || strcmp(argv[1], "supervise") != 0)
		return;
	const char *bin = getenv(GOS_EARLY_COLLECTOR_ENV);
	if (bin == NULL || bin[0] != '/')
		return;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		gos_early_errno = errno;
		return;
	}
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		gos_early_errno = errno;
		close(sv[0]);
		close(sv[1]);
		return;
	}
	if (pid == 0) {
		close(sv[0]);
		child(bin, sv[1], parent);
	}
	close(sv[1]);
	gos_early_pid = pid;
	gos_early_fd = sv[0];
}
