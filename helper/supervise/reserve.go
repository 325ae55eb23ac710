package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// reserveName is a file the supervisor keeps in the output dir while the
// collector runs, reserveBytes long, and removes at the drain before it
// writes the receipt, state.json and its last log lines: when the file
// system fills up (a full disk, the user's quota), those still have room.
const reserveName = ".gym-otel-reserve"

// reserveBytes is the reserve's size: far more than the receipt (about
// 2 KiB), state.json and the supervisor's last lines need.
const reserveBytes = 256 << 10

// reserve makes the reserve file (allocated, not sparse). A file system
// that cannot allocate it now is logged; the run goes on without it.
func (s *supervisor) reserve() {
	path := filepath.Join(s.out, reserveName)
	f, err := os.OpenFile(s.path(reserveName), os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		s.log.Warnf("the receipt's reserve %s: %v", path, unwrapPath(err))
		return
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, reserveBytes); err != nil {
		// A file system without fallocate: write it.
		_, err = f.WriteAt(make([]byte, reserveBytes), 0)
		if err != nil {
			s.log.Warnf("the receipt's reserve %s: %v", path, err)
		}
	}
}

// release removes the reserve file.
func (s *supervisor) release() {
	if p := s.path(reserveName); p != "" {
		os.Remove(p)
	}
}

// writeTrouble says why the file exporters could not write, from the
// output dir's file system as the collector left it (before release):
// full (less than twice the reserve free for the job's user), or refusing
// for another reason (a quota, or full for a while and freed since).
// when says when it looked ("now", "at the drain"); at is the dir's base
// path for the look, out its path for people.
func writeTrouble(at, out, when string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(at, &st); err != nil {
		return fmt.Sprintf("the file system refused the writes (its state is unknown: %v)", err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < 2*reserveBytes {
		return fmt.Sprintf("the file system of %s was full (%d KiB free of %d MiB %s)", out, free>>10, int64(st.Blocks)*int64(st.Bsize)>>20, when)
	}
	return fmt.Sprintf("the file system of %s refused the writes (%d MiB free %s: the user's quota, or it was full for a while)", out, free>>20, when)
}
