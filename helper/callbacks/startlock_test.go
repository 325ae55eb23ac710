package callbacks

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestSweepStartLocks: the prolog's sweep removes the start locks
// (collector_wait=step) of jobs with no record dir whose lock is free, and
// leaves the current job's, a held one (a start under way), one beside a
// record dir (its epilog's) and names that are not a start lock's.
func TestSweepStartLocks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root's record dir: needs root")
	}
	recordDir := t.TempDir()
	if err := os.Chmod(recordDir, 0o711); err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(recordDir, "n1")
	if err := os.Mkdir(base, 0o711); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".start-5.lock", ".start-6.lock", ".start-7.lock", ".start-9.lock", ".start-x.lock", ".start-8.ready"} {
		if err := os.WriteFile(filepath.Join(base, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(base, "6"), 0o700); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(filepath.Join(base, ".start-7.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	sweepStartLocks(recordDir, "n1", 9, logrus.New())
	for name, kept := range map[string]bool{".start-5.lock": false, ".start-6.lock": true, ".start-7.lock": true, ".start-9.lock": true, ".start-x.lock": true, ".start-8.ready": true} {
		_, err := os.Lstat(filepath.Join(base, name))
		if got := err == nil; got != kept {
			t.Errorf("%s: kept %v, want %v", name, got, kept)
		}
	}
	// Once its start ends (the lock freed) and with no record dir, the
	// held one goes at the next sweep.
	held.Close()
	sweepStartLocks(recordDir, "n1", 9, logrus.New())
	if _, err := os.Lstat(filepath.Join(base, ".start-7.lock")); err == nil {
		t.Error(".start-7.lock: kept after its lock was freed")
	}
	for _, c := range []struct {
		name string
		id   uint32
		ok   bool
	}{{".start-12.lock", 12, true}, {".start-.lock", 0, false}, {".start-12.lockx", 0, false}, {"start-12.lock", 0, false}, {".start-99999999999.lock", 0, false}} {
		if id, ok := startLockJob(c.name); ok != c.ok || (ok && id != c.id) {
			t.Errorf("startLockJob(%q) = %d, %v; want %d, %v", c.name, id, ok, c.id, c.ok)
		}
	}
}
