// The collector's process is not dumpable (not generated: the builder
// rewrites main.go, components.go and main_*.go only).

//go:build linux

package main

import "syscall"

// prSetDumpable is prctl(2)'s PR_SET_DUMPABLE.
const prSetDumpable = 4

// init marks the process not dumpable, as the supervisor marks itself: the
// job's tasks run as the user the collector runs as, and a dumpable
// process's memory, environment (the plugin's token, the backend's) and
// descriptors are open to every process of its uid (/proc/<pid>/environ,
// /proc/<pid>/mem, ptrace, pidfd_getfd). Not dumpable, they belong to
// root. The kernel resets the flag at execve; it holds from here to the
// collector's end. Before this init, the collector's environment is
// readable by the user's processes for the milliseconds of the Go
// runtime's start and of the packages' inits, unless the binary is
// installed execute-only (mode 0711, as the RPM and make install do): the
// kernel then makes the process not dumpable at the execve itself.
func init() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
}
