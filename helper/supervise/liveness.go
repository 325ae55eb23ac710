package supervise

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// The liveness part of the supervisor's launch contract (besides EnvEncoded,
// EnvFacts and EnvRecord): what the node knows of the job's end, so that the
// supervisor asks Slurm nothing while it can rely on the epilog.
const (
	// EnvSlurmd is "<pid> <start>": the slurmd that ran the job's prolog
	// on this node (the prolog process's parent) and its start time in
	// clock ticks since boot (/proc/<pid>/stat field 22). Unset when the
	// prolog's parent is not a slurmd.
	EnvSlurmd = "GYM_OTEL_SLURMD"
	// EnvSlurmdExe is the path of the node's slurmd binary: the
	// /proc/<pid>/exe of the slurmd that ran the prolog, read as root,
	// without a " (deleted)" suffix. Unset when it could not be read.
	EnvSlurmdExe = "GYM_OTEL_SLURMD_EXE"
	// EnvJobEnd is the job's end time as of its start, Unix seconds (the
	// prolog's SLURM_JOB_END_TIME); unset when Slurm does not say.
	EnvJobEnd = "GYM_OTEL_JOB_END"
)

// SlurmdAnchor returns EnvSlurmd's value for the slurmd with this pid, or
// an error when pid is not a running slurmd: named slurmd
// (/proc/<pid>/comm) and run by root (every uid 0).
func SlurmdAnchor(pid int) (string, error) {
	c, err := proc.Comm(pid)
	if err != nil {
		return "", err
	}
	if c != "slurmd" {
		return "", fmt.Errorf("process %d is %q, not slurmd", pid, c)
	}
	if !proc.RunsAsRoot(pid) {
		return "", fmt.Errorf("process %d is named slurmd but does not run as root", pid)
	}
	start, err := proc.StartTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d %d", pid, start), nil
}

// SlurmdExe returns EnvSlurmdExe's value for the slurmd with this pid (see
// SlurmdAnchor): the path of the binary it runs. Needs root (the kernel
// shows another user's /proc/<pid>/exe to root only).
func SlurmdExe(pid int) (string, error) {
	if _, err := SlurmdAnchor(pid); err != nil {
		return "", err
	}
	return proc.ExePath(pid)
}

// SlurmdAliveFunc parses EnvSlurmd's value into Options.SlurmdAlive: true
// while that pid runs with that start time (a pid reused by another process
// after a slurmd restart has another start time). A /proc the supervisor
// cannot read (hidepid) reads as gone, which only means Slurm is asked.
// nil when v is empty or malformed.
func SlurmdAliveFunc(v string) func() bool {
	f := strings.Fields(v)
	if len(f) != 2 {
		return nil
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 1 {
		return nil
	}
	return func() bool {
		st, err := proc.StartTime(pid)
		return err == nil && st == start
	}
}

// ParseJobEnd parses EnvJobEnd's (or SLURM_JOB_END_TIME's) value, Unix
// seconds; zero when empty, malformed or 0 (no time limit).
func ParseJobEnd(v string) time.Time {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

// TheSlurmd returns Options.SlurmdAlive for this node's slurmd after the
// one that ran the prolog is gone (a slurmd restart): the only process that
// runs as root (every uid 0, which no user can give a process), is named
// like exe (the node's slurmd binary, EnvSlurmdExe) and runs that path,
// and whose parent is not one (slurmd's own short-lived forks are
// skipped). The path is compared, not the file: a package upgrade replaces
// the file, and the running slurmd's exe then reads "<path> (deleted)".
// The kernel shows a root process's exe only to root: run as the job's
// user, the path cannot be read and uid 0 decides. nil when exe is "",
// or there is no such process or more than one (several slurmd on one
// host, as in a simulated cluster): then nothing local can vouch.
func TheSlurmd(exe string) func() bool {
	if exe == "" {
		return nil
	}
	pids, err := proc.Pids()
	if err != nil {
		return nil
	}
	name := filepath.Base(exe)
	if len(name) > 15 { // comm is the name cut to 15 bytes
		name = name[:15]
	}
	isSlurmd := func(pid int) bool {
		c, err := proc.Comm(pid)
		if err != nil || c != name || !proc.RunsAsRoot(pid) {
			return false
		}
		p, err := proc.ExePath(pid)
		switch {
		case err == nil:
			return p == exe
		case errors.Is(err, os.ErrPermission):
			return true // uid 0 checked: the caller is not root
		default:
			return false
		}
	}
	found := ""
	for _, pid := range pids {
		if !isSlurmd(pid) {
			continue
		}
		st, err := proc.ReadStat(pid)
		if err != nil || isSlurmd(st.PPID) {
			continue
		}
		if found != "" {
			return nil
		}
		found = fmt.Sprintf("%d %d", pid, st.StartTime)
	}
	return SlurmdAliveFunc(found)
}
