package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// RemoveBy retries a busy group directory (EBUSY) only until its deadline,
// keeps what it could not remove in the group, and removes the rest.
func TestRemoveByDeadline(t *testing.T) {
	root := t.TempDir()
	hs := []Hierarchy{{Version: V2, Mount: filepath.Join(root, "unified")}, {Version: V1, Mount: filepath.Join(root, "pids"), Controllers: []string{"pids"}}}
	rel := "gym_otel/n1/job_7"
	for _, h := range hs {
		if err := os.MkdirAll(filepath.Join(h.Mount, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	busy := filepath.Join(hs[0].Mount, rel)
	if err := syscall.Mount("none", busy, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs to make a busy directory: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = syscall.Unmount(busy, syscall.MNT_DETACH)
		}
	})
	g := Open(hs, rel)
	const wait = 300 * time.Millisecond
	start := time.Now()
	err := g.RemoveBy(start.Add(wait))
	took := time.Since(start)
	if !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("RemoveBy of a busy directory: %v, want EBUSY", err)
	}
	if took < wait-20*time.Millisecond || took > wait+2*time.Second {
		t.Errorf("RemoveBy with a %s deadline took %s", wait, took)
	}
	if d := g.Dirs(); len(d) != 1 || d[0] != busy {
		t.Errorf("left in the group: %v, want only %s", d, busy)
	}
	if _, err := os.Lstat(filepath.Join(hs[1].Mount, rel)); !os.IsNotExist(err) {
		t.Errorf("the free directory was not removed: %v", err)
	}
	// Once it is free, a later attempt (deadline passed: one try) ends it.
	if err := syscall.Unmount(busy, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if err := g.RemoveBy(time.Now()); err != nil || g.Exists() {
		t.Fatalf("RemoveBy of the freed directory: %v, left %v", err, g.Dirs())
	}
}
