package callbacks

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// withMountinfo points jobGroup at a mountinfo of the test's making.
func withMountinfo(t *testing.T, text string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	old := mountinfo
	mountinfo = p
	t.Cleanup(func() { mountinfo = old })
}

func bufLog() (*logrus.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	return l, &buf
}

// TestJobGroupPolicy: cgroup=auto runs a collector without its group only
// on a node that mounts no writable hierarchy, and says so; where one is
// mounted, a group that cannot be made refuses the collector, naming why.
func TestJobGroupPolicy(t *testing.T) {
	const root = "22 1 0:20 / / rw - ext4 /dev/root rw\n"
	auto, required := Args{Cgroup: CgroupAuto}, Args{Cgroup: CgroupRequired}

	// Nothing mounted.
	withMountinfo(t, root)
	log, buf := bufLog()
	if g, err := jobGroup(auto, "c", "n1", 7, 1<<30, log); g != nil || err != nil {
		t.Fatalf("auto, no hierarchy: %v %v", g, err)
	}
	if !strings.Contains(buf.String(), "job 7: no cgroup for the collector on n1 (no cgroup hierarchy is mounted)") {
		t.Errorf("auto, no hierarchy: log %q", buf.String())
	}
	if _, err := jobGroup(required, "c", "n1", 7, 1<<30, log); err == nil || !strings.Contains(err.Error(), "cgroup=required): no cgroup hierarchy is mounted on n1") {
		t.Errorf("required, no hierarchy: %v", err)
	}

	// Mounted read-only only (an unprivileged container).
	withMountinfo(t, root+"30 22 0:30 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n")
	log, buf = bufLog()
	if g, err := jobGroup(auto, "c", "n1", 7, 1<<30, log); g != nil || err != nil {
		t.Fatalf("auto, read-only: %v %v", g, err)
	}
	if !strings.Contains(buf.String(), "mounted read-only") {
		t.Errorf("auto, read-only: log %q", buf.String())
	}

	// Mounted writable, but the group cannot be made there: refused under
	// auto too, never a collector without its group.
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	withMountinfo(t, root+"30 22 0:30 / "+notDir+" rw,nosuid - cgroup2 cgroup2 rw\n")
	log, buf = bufLog()
	g, err := jobGroup(auto, "c", "n1", 7, 1<<30, log)
	if g != nil || err == nil || !strings.Contains(err.Error(), "plugstack cgroup=auto: no collector without its group") || !strings.Contains(err.Error(), "attempt 3 of 3") {
		t.Fatalf("auto, mounted, create fails: %v %v", g, err)
	}
	t.Logf("refused: %v", err)

	// Mounted writable and the group made: no bound is never accepted.
	dir := t.TempDir()
	withMountinfo(t, root+"30 22 0:30 / "+dir+" rw,nosuid - cgroup2 cgroup2 rw\n")
	if _, err := jobGroup(auto, "c", "n1", 7, 0, log); err == nil || !strings.Contains(err.Error(), "without a bound") {
		t.Errorf("a zero bound: %v", err)
	}
	g, err = jobGroup(auto, "c", "n1", 7, 1<<30, log)
	if err != nil || g == nil || g.Rel != "gym_otel/c/n1/job_7" {
		t.Fatalf("auto, mounted: %v %v", g, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "gym_otel/c/n1/job_7")); err != nil || !fi.IsDir() {
		t.Fatalf("the group's directory: %v", err)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "gym_otel/c/n1")); err != nil {
		t.Errorf("the shared node level was removed with the job's group: %v", err)
	}
	// A systemd host with a unified tree and no delegated scope: auto
	// runs without a group and says why, required refuses naming it.
	old := placeGroups
	placeGroups = func(hs []cgroup.Hierarchy, node string) ([]cgroup.Hierarchy, error) {
		return nil, fmt.Errorf("%w: looked for /x/*.slice/slurmstepd.scope", cgroup.ErrNoDelegatedScope)
	}
	t.Cleanup(func() { placeGroups = old })
	log, buf = bufLog()
	if g, err := jobGroup(auto, "c", "n1", 7, 1<<30, log); g != nil || err != nil {
		t.Fatalf("auto, no scope: %v %v", g, err)
	}
	if !strings.Contains(buf.String(), "job 7: no cgroup for the collector on n1 (no delegated slurmstepd scope: looked for /x/*.slice/slurmstepd.scope)") {
		t.Errorf("auto, no scope: log %q", buf.String())
	}
	if _, err := jobGroup(required, "c", "n1", 7, 1<<30, log); err == nil || !strings.Contains(err.Error(), "cgroup=required) on n1: no delegated slurmstepd scope") {
		t.Errorf("required, no scope: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "gym_otel/c/n1/job_7")); !os.IsNotExist(err) {
		t.Errorf("a group was made without a scope: %v", err)
	}
	placeGroups = old
	if jobGroupOff, err := jobGroup(Args{Cgroup: CgroupOff}, "c", "n1", 7, 1<<30, log); jobGroupOff != nil || err != nil {
		t.Errorf("off: %v %v", jobGroupOff, err)
	}
}

func TestCgroupMemoryBytes(t *testing.T) {
	for _, c := range []struct {
		mem, cap int
		want     int64
		capped   bool
	}{
		{512, DefaultCgroupMemoryMaxMiB, 1024 << 20, false},
		{1024, DefaultCgroupMemoryMaxMiB, 2048 << 20, false},
		{65536, DefaultCgroupMemoryMaxMiB, 2048 << 20, true},
		{512, 600, 600 << 20, true},
		{65536, MaxCgroupMemoryMaxMiB, 128 << 30, false},
	} {
		if n, capped := cgroupMemoryBytes(c.mem, c.cap); n != c.want || capped != c.capped {
			t.Errorf("memory_limit_mib=%d cap=%d: %d %v, want %d %v", c.mem, c.cap, n, capped, c.want, c.capped)
		}
	}
}

// TestLeftProcesses: the drain's leftovers named by comm and pid, at most
// max of them, a gone pid with an empty name.
func TestLeftProcesses(t *testing.T) {
	self := os.Getpid()
	comm, err := proc.Comm(self)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := leftProcesses([]int{self}, 4), fmt.Sprintf("%q %d", comm, self); got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := leftProcesses([]int{self, 1 << 30, self, self}, 2), fmt.Sprintf("%q %d, \"\" %d, and 2 more", comm, self, 1<<30); got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// TestRunning: a zombie and a gone pid are not running; this process is.
func TestRunning(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	zombie := cmd.Process.Pid
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st, err := proc.ReadStat(zombie); err == nil && st.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child did not become a zombie")
		}
	}
	if got := running([]int{zombie, os.Getpid(), 1 << 30}); len(got) != 1 || got[0] != os.Getpid() {
		t.Errorf("running = %v, want [%d]", got, os.Getpid())
	}
}
