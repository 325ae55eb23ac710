package supervise

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// SlurmdAliveFunc parses launch.EnvSlurmd's value into Options.SlurmdAlive: true
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

// TheSlurmd returns Options.SlurmdAlive for this node's slurmd after the
// one that ran the prolog is gone (a slurmd restart): the only process that
// runs as root (every uid 0, which no user can give a process), is named
// like exe (the node's slurmd binary, launch.EnvSlurmdExe) and runs that path,
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
