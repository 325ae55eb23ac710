package launch

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/contract"
)

// CheckHoldSocket returns an error unless path (from root's record) is a
// socket owned by root in a directory owned by root that neither group nor
// others can write, neither of them a symbolic link: then only root can
// have bound it, and the listener is the one the prolog made and handed to
// the job's supervisor. The steps check the same in C
// (spank/holdsock.c).
func CheckHoldSocket(path string) error {
	if !filepath.IsAbs(path) || len(path) > contract.HoldPathMax {
		return fmt.Errorf("hold socket %q: not an absolute path of at most %d bytes", path, contract.HoldPathMax)
	}
	dir := filepath.Dir(path)
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("hold socket: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.IsDir() || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("hold socket: %s is not a directory of root's that only root can write (%s)", dir, fi.Mode())
	}
	fi, err = os.Lstat(path)
	if err != nil {
		return fmt.Errorf("hold socket: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || fi.Mode().Type() != os.ModeSocket || st.Uid != 0 {
		return fmt.Errorf("hold socket: %s is not a socket of root's (%s)", path, fi.Mode())
	}
	return nil
}

// EpilogLine starts the hold socket line that tells the epilog's start:
// "epilog start <unix ms>\n", answered "ok\n".
const EpilogLine = "epilog start "

// HoldConnTimeout bounds one connection's request and answer on the hold
// socket (the supervisor's server closes a connection after it).
const HoldConnTimeout = time.Second

// TellEpilogStart tells the job's supervisor on its hold socket (path, as
// root's record has it) that the epilog started at at: one line, answered
// "ok", within HoldConnTimeout/4. The path must pass CheckHoldSocket (a
// socket of root's in a dir only root can write: the prolog's listener,
// which the supervisor serves), or nothing is sent. Errors: not such a
// socket, no listener, no answer in time.
func TellEpilogStart(path string, at time.Time) error {
	if err := CheckHoldSocket(path); err != nil {
		return err
	}
	d := net.Dialer{Timeout: HoldConnTimeout / 4}
	c, err := d.Dial("unix", path)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(HoldConnTimeout / 4))
	if _, err := fmt.Fprintf(c, "%s%d\n", EpilogLine, at.UnixMilli()); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, _ := c.Read(buf)
	if string(buf[:n]) != "ok\n" {
		return fmt.Errorf("the supervisor answered %q", buf[:n])
	}
	return nil
}
