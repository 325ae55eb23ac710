package proc

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Child is a started process this one waits for: its exit is seen on
// Exited and its wait status read with Err.
type Child struct {
	// Cmd is the started command; Pid its process id, which is also its
	// process group id when it was started with Setsid or Setpgid.
	Cmd    *exec.Cmd
	Pid    int
	exited chan struct{}
	err    error
}

// Watch waits for the started cmd in the background (cmd.Wait, once): the
// only waiter it must have.
func Watch(cmd *exec.Cmd) *Child {
	c := &Child{Cmd: cmd, Pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c
}

// WatchPID waits in the background for pid, a child of this process that
// was not started through os/exec (the collector's early exec), as Watch
// does: Err is then an *exec.ExitError for an exit other than 0, and Cmd
// holds the process and name (Path, Args) only. The error is
// os.FindProcess's.
func WatchPID(pid int, name string) (*Child, error) {
	p, err := os.FindProcess(pid)
	if err != nil {
		return nil, err
	}
	c := &Child{Cmd: &exec.Cmd{Path: name, Args: []string{name}, Process: p}, Pid: pid, exited: make(chan struct{})}
	go func() {
		st, err := p.Wait()
		if err == nil && !st.Success() {
			err = &exec.ExitError{ProcessState: st}
		}
		c.Cmd.ProcessState = st
		c.err = err
		close(c.exited)
	}()
	return c, nil
}

// Exited is closed once the child has exited and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// Err is cmd.Wait's result (nil for an exit 0, an *exec.ExitError
// otherwise); read it only once Exited is closed.
func (c *Child) Err() error { return c.err }

// Running reports whether the child has not exited yet.
func (c *Child) Running() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// StopGroup ends the child's process group within bound: SIGTERM to the
// group (to the child alone when the group cannot be signalled), then it
// waits up to bound until the child has exited and, with wholeGroup,
// until no live process is left in the group, reaping on the way the
// orphaned descendants this process collects as their subreaper (see
// BecomeSubreaper; without wholeGroup nothing but the child is reaped,
// as another waiter may own this process's other children). Past the
// bound it SIGKILLs the group and the child and waits for the child's
// exit; killed reports that. A child that has already exited is left as
// it is.
func (c *Child) StopGroup(bound time.Duration, wholeGroup bool) (killed bool) {
	if !c.Running() {
		return false
	}
	if syscall.Kill(-c.Pid, syscall.SIGTERM) != nil {
		_ = c.Cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(bound)
	select {
	case <-c.exited:
	case <-time.After(bound):
	}
	for c.Running() || wholeGroup && groupAlive(c.Pid) {
		if time.Now().After(deadline) {
			c.KillGroup()
			<-c.exited
			if wholeGroup {
				ReapOrphans()
			}
			return true
		}
		if wholeGroup {
			ReapOrphans()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// KillGroup sends SIGKILL to the child's process group and to the child
// (which may have left it), and does not wait.
func (c *Child) KillGroup() {
	_ = syscall.Kill(-c.Pid, syscall.SIGKILL)
	_ = c.Cmd.Process.Kill()
}

// WaitExit waits up to bound for the child's exit and reports whether it
// came.
func (c *Child) WaitExit(bound time.Duration) bool {
	select {
	case <-c.exited:
		return true
	case <-time.After(bound):
		return false
	}
}

// groupAlive reports whether a live (not zombie) process is left in process
// group pgid, reaping orphaned zombies it finds.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	ReapOrphans()
	return syscall.Kill(-pgid, 0) == nil
}

// ReapOrphans collects exited descendants that were reparented to this
// process (a subreaper), without blocking. It reaps any exited child: call
// it only where no other waiter owns one (a Child it watches has exited).
func ReapOrphans() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// TerminatedBy reports whether err (exec.Cmd.Wait's) is an exit by signal
// sig, or by the shell convention 128+sig.
func TerminatedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok {
		return false
	}
	return (ws.Signaled() && ws.Signal() == sig) || (ws.Exited() && ws.ExitStatus() == 128+int(sig))
}
