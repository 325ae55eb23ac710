package proc

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Credential is who a started process runs as: uid, primary gid and the
// supplementary groups (the primary among them, as SupplementaryGroups
// gives them; nil: none).
type Credential struct {
	UID, GID uint32
	Groups   []uint32
}

// StartAsUser starts cmd as cred in a session of its own (Setsid; any
// other cmd.SysProcAttr is replaced), with what a job's process gets
// rather than what this process (slurmd's prolog) has:
//   - no_new_privs: no setuid or file capability can raise it again;
//   - no descriptor of this process but cmd's own (stdio, ExtraFiles):
//     every other one above 2 is marked close-on-exec for the fork
//     (slurmstepd may hold some without it);
//   - oom_score_adj 0 (slurmd's is often -1000), set with privilege so the
//     user cannot lower it again;
//   - its signal mask and dispositions are those of the forking thread
//     (Go's runtime: an empty mask); a program started under slurmstepd
//     clears its own (ClearSignals);
//   - start, when not nil, does the start itself (a cgroup's StartInside,
//     which places the child in the group at its birth through a cgroup
//     fd, CLONE_INTO_CGROUP); else cmd.Start.
//
// It forks from an OS thread of its own that is never unlocked, so it ends
// with its goroutine: no_new_privs is a thread attribute the child
// inherits from the thread that forks. Everything else this process
// changes on itself for the fork is restored before it returns (later
// SPANK plugins run their job prolog in the same process). Errors: the
// start's, or the setting that failed.
func StartAsUser(cmd *exec.Cmd, cred Credential, start func(*exec.Cmd) error) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: cred.UID, Gid: cred.GID, Groups: cred.Groups},
		Setsid:     true,
	}
	if start == nil {
		start = (*exec.Cmd).Start
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- forkContained(cmd, start)
	}()
	return <-errc
}

// forkContained starts cmd with this process's attributes set aside for
// the child (see StartAsUser) and restores them.
func forkContained(cmd *exec.Cmd, start func(*exec.Cmd) error) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	undoFDs := closeOnExecAll()
	defer undoFDs()
	undoOOM, err := setOOMScoreAdj("0")
	if err != nil {
		return err
	}
	defer undoOOM()
	return start(cmd)
}

// closeOnExecAll marks every descriptor above 2 close-on-exec (slurmstepd
// may hold some without it) and returns how to undo that.
func closeOnExecAll() (undo func()) {
	ents, _ := os.ReadDir("/proc/self/fd")
	var changed []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err == nil {
			changed = append(changed, fd)
		}
	}
	return func() {
		for _, fd := range changed {
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags&^unix.FD_CLOEXEC)
			}
		}
	}
}

// setOOMScoreAdj sets this process's oom_score_adj and returns how to
// restore it.
func setOOMScoreAdj(v string) (undo func(), err error) {
	const p = "/proc/self/oom_score_adj"
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 64))
	f.Close()
	if err != nil {
		return nil, err
	}
	old := string(b)
	if err := os.WriteFile(p, []byte(v), 0); err != nil {
		return nil, fmt.Errorf("oom_score_adj: %w", err)
	}
	return func() { _ = os.WriteFile(p, []byte(strings.TrimSpace(old)), 0) }, nil
}
