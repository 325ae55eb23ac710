package launch

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
)

// CheckControlSocket returns an error unless path (from root's record) is a
// socket owned by root in a directory owned by root that neither group nor
// others can write, neither of them a symbolic link: then only root can
// have bound it, and the listener is the one the prolog made and handed to
// the job's supervisor. The steps check the same in C
// (spank/controlsock.c).
func CheckControlSocket(path string) error {
	if !filepath.IsAbs(path) || len(path) > contract.ControlPathMax {
		return fmt.Errorf("control socket %q: not an absolute path of at most %d bytes", path, contract.ControlPathMax)
	}
	dir := filepath.Dir(path)
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.IsDir() || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("control socket: %s is not a directory of root's that only root can write (%s)", dir, fi.Mode())
	}
	fi, err = os.Lstat(path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || fi.Mode().Type() != os.ModeSocket || st.Uid != 0 {
		return fmt.Errorf("control socket: %s is not a socket of root's (%s)", path, fi.Mode())
	}
	return nil
}

// ControlConnTimeout bounds one connection's request and answer on the hold
// socket (the supervisor's server closes a connection after it).
const ControlConnTimeout = time.Second

// JobExit is the job's exit as slurmd gives it to the job epilog's
// environment (Slurm 22.05 to 26.05, prep/script's slurmd part, when the
// job's exit code is known): SLURM_JOB_EXIT_CODE, the batch script's
// wait status (exit code << 8, or the signal), and SLURM_JOB_DERIVED_EC,
// the highest of the steps' wait statuses; SLURM_JOB_EXIT_CODE2 is the
// first as "code:signal".
type JobExit struct {
	Status, Derived uint32
}

// WaitCode is the exit code of a wait status (WEXITSTATUS), WaitSignal its
// signal (WTERMSIG; 0: none).
func WaitCode(status uint32) int64   { return int64(status>>8) & 0xff }
func WaitSignal(status uint32) int64 { return int64(status & 0x7f) }

// JobExitFromEnv reads the job's exit from the job epilog's environment
// (getenv): SLURM_JOB_EXIT_CODE and SLURM_JOB_DERIVED_EC, both unsigned
// wait statuses (the derived one 0 when absent). nil when slurmd did not
// set SLURM_JOB_EXIT_CODE (the exit code not known) or it is not a number.
func JobExitFromEnv(getenv func(string) string) *JobExit {
	st, err1 := strconv.ParseUint(getenv("SLURM_JOB_EXIT_CODE"), 10, 32)
	de, err2 := strconv.ParseUint(getenv("SLURM_JOB_DERIVED_EC"), 10, 32)
	if err1 != nil {
		return nil
	}
	if err2 != nil {
		de = 0
	}
	return &JobExit{Status: uint32(st), Derived: uint32(de)}
}

// TellEpilogStart tells the job's supervisor on its control socket (path, as
// root's record has it) that the epilog started at at, and the job's exit
// when known (exit; nil: not known): one line, contract.ControlEpilogStart's
// "epilog start <unix ms> [<status> <derived>]", answered "ok", within
// ControlConnTimeout/4. A supervisor of an earlier release (a job started
// before the node's upgrade) knows only the line without the exit: when
// it does not answer "ok" to the line with it, that line is sent once
// more without it, within another ControlConnTimeout/4. The path must pass
// CheckControlSocket (a socket of root's in a dir only root can write: the
// prolog's listener, which the supervisor serves), or nothing is sent.
// Errors: not such a socket, no listener, no answer in time.
func TellEpilogStart(path string, at time.Time, exit *JobExit) error {
	if err := CheckControlSocket(path); err != nil {
		return err
	}
	line := fmt.Sprintf("%s %d", contract.ControlEpilogStart, at.UnixMilli())
	if exit == nil {
		return tellControl(path, line)
	}
	err := tellControl(path, line+fmt.Sprintf(" %d %d", exit.Status, exit.Derived))
	var refused errNotOK
	if errors.As(err, &refused) {
		return tellControl(path, line)
	}
	return err
}

// errNotOK is a supervisor's answer other than "ok".
type errNotOK struct{ answer []byte }

func (e errNotOK) Error() string { return fmt.Sprintf("the supervisor answered %q", e.answer) }

// tellControl sends line on the control socket at path and reads the answer,
// within ControlConnTimeout/4; an answer other than "ok" (the connection
// closed unanswered among them) is errNotOK, no answer in time another
// error.
func tellControl(path, line string) error {
	d := net.Dialer{Timeout: ControlConnTimeout / 4}
	c, err := d.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ControlConnTimeout / 4))
	if _, err := fmt.Fprintf(c, "%s\n", line); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if os.IsTimeout(err) {
		return fmt.Errorf("the supervisor did not answer within %v", ControlConnTimeout/4)
	}
	if string(buf[:n]) != contract.ControlOK+"\n" {
		return errNotOK{buf[:n]}
	}
	return nil
}
