package launch

import (
	"fmt"
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

// ParseJobEnd parses EnvJobEnd's (or SLURM_JOB_END_TIME's) value, Unix
// seconds; zero when empty, malformed or 0 (no time limit).
func ParseJobEnd(v string) time.Time {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}
