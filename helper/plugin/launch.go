package plugin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/lifecycle"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// MaxReadinessBytes bounds what the prolog reads of the supervisor's
// readiness line (lifecycle.Readiness: one JSON line; the user's program
// could otherwise write without end).
const MaxReadinessBytes = 64 * 1024

// supervisor is a started `<cli> supervise --from-env`.
type supervisor struct {
	cmd       *exec.Cmd
	pid       int
	readiness *os.File
	group     *cgroup.Group // nil on a node without cgroups
	exited    chan struct{}
}

// startSupervisor starts the supervisor as the job's user (uid, gid,
// groups), in its own session, with exactly env, fd 3 the write end of the
// readiness pipe and no other descriptor of this process, and with what a
// job's process gets rather than what slurmd has:
//   - born inside group g (when not nil; cgroup.Group.StartInside): on v2
//     placed there by clone3 (CLONE_INTO_CGROUP), on v1 forked by a thread
//     of its own that alone joins g around the fork and is discarded
//     after; this process never enters the user's group, and no instant
//     exists in which the supervisor, or anything it starts, is outside
//     it. A thread that cannot leave g again fails the start;
//   - (the supervisor lowers its resource limits to the node's ordinary
//     ones itself, first thing: see proc.LowerToNodeLimits);
//   - oom_score_adj 0 (slurmd's is often -1000), set with privilege so the
//     user cannot lower it again;
//   - no_new_privs: no setuid or file capability can raise it again.
//
// Everything this process changes on itself for the fork is restored
// before it returns (later SPANK plugins run their job prolog in the same
// process).
func startSupervisor(cli string, env []string, uid, gid uint32, groups []uint32, g *cgroup.Group) (*supervisor, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	cmd := exec.Command(cli, "supervise", "--from-env")
	cmd.Env = env
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{w} // fd 3 = lifecycle.ReadinessFD
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups},
		Setsid:     true,
	}
	errc := make(chan error, 1)
	go func() {
		// no_new_privs is a thread attribute the child inherits from the
		// thread that forks: set it on a thread of its own, which is
		// never unlocked, so it ends with this goroutine.
		runtime.LockOSThread()
		errc <- forkContained(cmd, g)
	}()
	if err := <-errc; err != nil {
		r.Close()
		return nil, err
	}
	s := &supervisor{cmd: cmd, pid: cmd.Process.Pid, readiness: r, group: g, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	return s, nil
}

// forkContained starts cmd with this process's attributes set aside for
// the child (see startSupervisor) and restores them.
func forkContained(cmd *exec.Cmd, g *cgroup.Group) error {
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
	if g != nil {
		return g.StartInside(cmd)
	}
	return cmd.Start()
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
	old, err := readBounded(p, 64)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p, []byte(v), 0); err != nil {
		return nil, fmt.Errorf("oom_score_adj: %w", err)
	}
	return func() { _ = os.WriteFile(p, []byte(strings.TrimSpace(old)), 0) }, nil
}

// readBounded reads at most max bytes of path.
func readBounded(path string, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max))
	return string(b), err
}

// wait reads the readiness line (at most MaxReadinessBytes), bounded by
// timeout.
func (s *supervisor) wait(timeout time.Duration) (lifecycle.Readiness, error) {
	type result struct {
		line []byte
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := bufio.NewReaderSize(io.LimitReader(s.readiness, MaxReadinessBytes+1), MaxReadinessBytes).ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			line, err = nil, fmt.Errorf("the supervisor's report is longer than %d bytes", MaxReadinessBytes)
		}
		ch <- result{append([]byte(nil), line...), err}
	}()
	select {
	case res := <-ch:
		s.readiness.Close()
		if res.err != nil && len(res.line) == 0 {
			if errors.Is(res.err, io.EOF) {
				return lifecycle.Readiness{}, fmt.Errorf("the supervisor exited without a report")
			}
			return lifecycle.Readiness{}, res.err
		}
		return lifecycle.ReadReadiness(res.line)
	case <-time.After(timeout):
		s.readiness.Close()
		return lifecycle.Readiness{}, fmt.Errorf("no report from the supervisor within %s (health_check_timeout_seconds + 5, within the prolog's deadline: plugstack prolog_timeout, below Slurm's PrologEpilogTimeout)", timeout.Round(100*time.Millisecond))
	}
}

// kill ends the supervisor and everything it started (its cgroup, which
// it then removes, else its session) and reaps it, each within
// timing.GroupKillBound.
func (s *supervisor) kill() {
	if s.group != nil {
		_, _ = s.group.Kill(timing.GroupKillBound)
	}
	_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	_ = s.cmd.Process.Kill()
	select {
	case <-s.exited:
	case <-time.After(timing.GroupKillBound):
	}
	if s.group != nil {
		_ = s.group.Remove()
	}
}
