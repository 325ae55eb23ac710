package callbacks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// The epilog's steps are slowed the way a node can slow them: a group
// whose kill never empties it (a task stuck in the kernel), a group
// directory whose rmdir keeps failing EBUSY, a supervisor that ignores
// SIGTERM with a drain bound far beyond the deadline, hundreds of orphaned
// groups. Each time the epilog returns within its deadline (plus one round
// of a kill or an rmdir, which Slurm's margin absorbs) and logs what it
// left for a later sweep. The hierarchies are directories of the test's
// own, named cgroup2 and cgroup (v1) in a mountinfo of its making: the
// kernel's cgroup files are regular files there, so nothing is signalled
// (the v2 group's kill is a write to its cgroup.kill).

// overrun is what the epilog may take beyond its deadline: one round of a
// kill (about 0.1 s) or an rmdir on a loaded machine, well inside Slurm's
// margin (timing.SlurmMargin).
const overrun = timing.SlurmMargin / 2

const (
	testCluster = "c"
	testNode    = "n1"
)

// fakeHierarchies makes seven hierarchies (v2 and the six v1 ones the
// plugin uses) below a temp dir and points mountinfo at them.
func fakeHierarchies(t *testing.T) []string {
	t.Helper()
	root := t.TempDir()
	var mounts []string
	var mi strings.Builder
	add := func(name, fs, opts string) {
		m := filepath.Join(root, name)
		if err := os.MkdirAll(m, 0o755); err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, m)
		fmt.Fprintf(&mi, "%d 1 0:%d / %s rw,nosuid - %s %s %s\n", 30+len(mounts), 30+len(mounts), m, fs, fs, opts)
	}
	add("unified", "cgroup2", "rw")
	for _, c := range []string{"memory", "pids", "devices", "freezer", "cpuset", "cpuacct"} {
		add(c, "cgroup", "rw,"+c)
	}
	withMountinfo(t, mi.String())
	return mounts
}

// fakeGroup makes job id's group on every hierarchy; procs lists the pids
// its cgroup.procs shows (forever: nothing here empties it).
func fakeGroup(t *testing.T, mounts []string, id uint32, procs string) []string {
	t.Helper()
	var dirs []string
	for i, m := range mounts {
		d := filepath.Join(m, cgroup.ClusterBase(testCluster), testNode, fmt.Sprintf("job_%d", id))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if procs != "" {
			if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(procs), 0o644); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				if err := os.WriteFile(filepath.Join(d, "cgroup.kill"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		dirs = append(dirs, d)
	}
	return dirs
}

// emptyGroup does what the kernel does once a group's last task is gone:
// its files no longer hold the directory.
func emptyGroup(t *testing.T, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		for _, f := range []string{"cgroup.procs", "cgroup.kill"} {
			if err := os.Remove(filepath.Join(d, f)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
}

func jobRecord(t *testing.T, recordDir string, id uint32, rec *record.Record) string {
	t.Helper()
	dir, err := record.MakeJobDir(recordDir, testNode, id)
	if err != nil {
		t.Fatal(err)
	}
	if rec != nil {
		if err := record.Write(dir, rec); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runEpilog runs the epilog with a deadline of budget and returns how long
// it took and what it logged.
func runEpilog(t *testing.T, recordDir string, id uint32, budget time.Duration) (time.Duration, string) {
	t.Helper()
	l, buf := bufLog()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	err := epilog(ctx, recordDir, testCluster, testNode, id, l)
	took := time.Since(start)
	if err != nil {
		t.Errorf("epilog: %v", err)
	}
	t.Logf("epilog with a %s deadline returned in %d ms", budget, took.Milliseconds())
	if testing.Verbose() {
		t.Logf("its log:\n%s", buf)
	}
	if took > budget+overrun {
		t.Errorf("epilog took %s, past its %s deadline and the %s allowed for the last round\n%s", took, budget, overrun, buf)
	}
	return took, buf.String()
}

func gone(t *testing.T, paths ...string) bool {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			return false
		}
	}
	return true
}

// A group whose kill never empties it (on all seven hierarchies): the kill
// stops where the removal still fits, the removal is tried once, the
// record is removed anyway and the group is left, logged; the next
// prolog's sweep ends it once it can be ended.
func TestEpilogBudgetGroupNeverEmpties(t *testing.T) {
	mounts := fakeHierarchies(t)
	recordDir := t.TempDir()
	const id = 101
	dirs := fakeGroup(t, mounts, id, "4194301\n")
	recDir := jobRecord(t, recordDir, id, &record.Record{Status: "failed", OnFailure: "continue"})
	_, log := runEpilog(t, recordDir, id, 3*time.Second)
	if !gone(t, recDir) {
		t.Error("the record dir is still there")
	}
	if gone(t, dirs[0]) {
		t.Fatal("the fake group was removed while it still had processes")
	}
	for _, want := range []string{"cgroup gym_otel/c/n1/job_101 not ended by the deadline (directories left: 7)", "left for the next prolog's or epilog's sweep of orphaned cgroups", "processes left after"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}

	// Later the group empties: another job's prolog sweep ends it.
	emptyGroup(t, dirs)
	l, buf := bufLog()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	SweepStale(ctx, recordDir, testCluster, testNode, 102, l)
	if !gone(t, dirs...) || !strings.Contains(buf.String(), "removed the cgroup of job 101, which had no record on this node") {
		t.Errorf("the next sweep did not end the group left:\n%s", buf)
	}
}

// A group directory whose rmdir keeps failing EBUSY (here: a mount point,
// as busy as a group a dying task still holds): the removal retries for
// timing.RemoveReserve, never past the deadline, and leaves the group.
func TestEpilogBudgetRemoveBusy(t *testing.T) {
	mounts := fakeHierarchies(t)
	recordDir := t.TempDir()
	const id = 201
	dirs := fakeGroup(t, mounts, id, "")
	if err := syscall.Mount("none", dirs[0], "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a tmpfs to make a busy directory: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dirs[0], syscall.MNT_DETACH) })
	if err := os.Remove(dirs[0]); err != syscall.EBUSY && !strings.Contains(fmt.Sprint(err), "busy") {
		t.Fatalf("rmdir of the busy directory: %v, want EBUSY", err)
	}
	jobRecord(t, recordDir, id, nil)
	took, log := runEpilog(t, recordDir, id, 10*time.Second)
	if took > timing.RemoveReserve+overrun {
		t.Errorf("the busy rmdir was retried for %s: its bound is %s", took, timing.RemoveReserve)
	}
	if !strings.Contains(log, "cgroup gym_otel/c/n1/job_201 not ended by the deadline (directories left: 1)") || !strings.Contains(log, "device or resource busy") {
		t.Errorf("log does not say the busy group was left:\n%s", log)
	}
	if !gone(t, dirs[1:]...) {
		t.Error("the group's other directories were not removed")
	}
	// It retried: the removal used its reserve, not one attempt.
	if took < timing.RemoveReserve-50*time.Millisecond {
		t.Errorf("the busy rmdir was given up after %s, before its %s", took, timing.RemoveReserve)
	}

	// A deadline nearer than the reserve stops the retries at the deadline.
	jobRecord(t, recordDir, id, nil)
	took, _ = runEpilog(t, recordDir, id, 300*time.Millisecond)
	if took > 300*time.Millisecond+overrun {
		t.Errorf("the busy rmdir was retried for %s past a 300ms deadline", took)
	}
}

// A supervisor that ignores SIGTERM and whose record allows a drain far
// past the deadline (no cgroup on the node): the wait is cut where the
// kill and removal still fit, logged, and its session is SIGKILLed.
func TestEpilogBudgetDrainCut(t *testing.T) {
	withMountinfo(t, "") // a node without cgroups
	recordDir := t.TempDir()
	const id = 301
	cmd, exited := startSession(t, "sh", "-c", `trap "" TERM; while :; do sleep 1; done`)
	var st proc.Stat
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; { // until the shell ignores SIGTERM
		st, err = proc.ReadStat(cmd.Process.Pid)
		if err == nil && ignoresTERM(cmd.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell did not start: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	jobRecord(t, recordDir, id, &record.Record{Status: "ready", OnFailure: "continue", DrainTimeout: 600,
		SupervisorPID: cmd.Process.Pid, SupervisorStart: st.StartTime, UID: uint32(os.Getuid())})
	budget := timing.GroupKillBound + timing.RemoveReserve + 2*time.Second
	_, log := runEpilog(t, recordDir, id, budget)
	if !strings.Contains(log, "the supervisor's drain gets") || !strings.Contains(log, "of its 10m0s") {
		t.Errorf("log does not say the drain was cut:\n%s", log)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the supervisor survived the epilog")
	}
}

// TestEpilogBudgetDrainFitted: a drain bound that fits the epilog's
// deadline but for the milliseconds the epilog spent before it (the
// prolog fits drain_timeout to the same deadline) is not logged as cut.
func TestEpilogBudgetDrainFitted(t *testing.T) {
	withMountinfo(t, "") // a node without cgroups
	recordDir := t.TempDir()
	const id = 302
	cmd, exited := startSession(t, "sleep", "60")
	st, err := proc.ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	const drain = 3
	jobRecord(t, recordDir, id, &record.Record{Status: "ready", OnFailure: "continue", DrainTimeout: drain,
		SupervisorPID: cmd.Process.Pid, SupervisorStart: st.StartTime, UID: uint32(os.Getuid())})
	_, log := runEpilog(t, recordDir, id, timing.GroupKillBound+timing.RemoveReserve+drain*time.Second)
	if strings.Contains(log, "the supervisor's drain gets") {
		t.Errorf("a drain fitted to the deadline was logged as cut:\n%s", log)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the supervisor survived the epilog")
	}
}

// startSession starts name with args in a session of its own (a stand-in
// supervisor), killed with its session at the test's end; exited gets its
// Wait's result.
func startSession(t *testing.T, name string, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return cmd, exited
}

// ignoresTERM reads SigIgn of /proc/<pid>/status.
func ignoresTERM(pid int) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && n&(1<<(syscall.SIGTERM-1)) != 0
		}
	}
	return false
}

// Hundreds of orphaned groups that never empty: the epilog's own job ends
// at once, its sweep takes at most timing.EpilogSweepBound and names what
// it left; the prolog's sweep stops at its context the same way.
func TestEpilogBudgetManyOrphans(t *testing.T) {
	mounts := fakeHierarchies(t)
	recordDir := t.TempDir()
	const n = 300
	for i := uint32(0); i < n; i++ {
		fakeGroup(t, mounts[:2], 1000+i, "4194301\n")
	}
	const id = 401
	own := fakeGroup(t, mounts, id, "")
	jobRecord(t, recordDir, id, nil)
	const deadline = 20 * time.Second
	took, log := runEpilog(t, recordDir, id, deadline)
	if !gone(t, own...) {
		t.Error("the epilog's own group was not removed")
	}
	// The sweep stops at its own bound, not at the epilog's deadline: each
	// orphan here costs about 0.2 s, so an unbounded sweep of 300 takes
	// about a minute and a sweep bounded by the deadline 20 s. Half the
	// deadline tells them apart on a loaded machine, where the orphan
	// begun before the bound can run on past it (its processes are
	// waited for), which a tighter figure flaked on.
	t.Logf("the epilog took %s with %d orphans (sweep bound %s)", took, n, timing.EpilogSweepBound)
	if took > deadline/2 {
		t.Errorf("the epilog took %s with orphans: its sweep is bounded by %s", took, timing.EpilogSweepBound)
	}
	if !strings.Contains(log, "orphaned cgroups (jobs [") || !strings.Contains(log, "left for a later prolog or epilog on this node") {
		t.Errorf("log does not name the orphans left:\n%s", log)
	}

	l, buf := bufLog()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	SweepStale(ctx, recordDir, testCluster, testNode, 402, l)
	if took := time.Since(start); took > 2*time.Second+overrun {
		t.Errorf("the prolog's sweep took %s of a 2s context", took)
	}
	if !strings.Contains(buf.String(), "left for a later prolog or epilog on this node") {
		t.Errorf("the prolog's sweep does not say what it left:\n%s", buf)
	}
}

// A supervisor gone before the epilog, and the group the record names gone
// too (systemd's stop of Slurm's scope kills its processes and removes its
// subtree): the log names the group as gone, not the node as having none;
// with no group in the record, the log says the node has none.
func TestEpilogGroupGoneWithSupervisor(t *testing.T) {
	fakeHierarchies(t) // hierarchies, but no group of the job's
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Wait() // pid is gone
	for _, c := range []struct {
		id     uint32
		cgroup string
		want   string
	}{
		{302, "gym_otel/c/n1/job_302", "and the collector's cgroup gym_otel/c/n1/job_302 were gone before the epilog"},
		{303, "", "the node has no cgroup for the collector"},
	} {
		recordDir := t.TempDir()
		dir := jobRecord(t, recordDir, c.id, &record.Record{Status: "ready", OnFailure: "continue", DrainTimeout: 1,
			SupervisorPID: pid, SupervisorStart: 1, UID: uint32(os.Getuid()), Cgroup: c.cgroup})
		_, log := runEpilog(t, recordDir, c.id, 10*time.Second)
		if !strings.Contains(log, c.want) {
			t.Errorf("job %d: the log does not say %q:\n%s", c.id, c.want, log)
		}
		if !gone(t, dir) {
			t.Errorf("job %d: the record %s is left", c.id, dir)
		}
	}
}
