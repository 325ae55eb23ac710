package plugin_test

// The epilog within its deadline on real Slurm: a job's cgroup that cannot
// be removed (busy) is left, logged, without holding the epilog past its
// deadline or draining the node, and the next job's prolog on the node
// ends it once it can be ended.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// TestEpilogLeavesBusyGroup: while a job runs, a group is made inside the
// job's collector cgroup on one hierarchy (root's doing here; what keeps a
// cgroup busy, EBUSY on its rmdir, like a task that does not die). The
// epilog kills what is in the group, retries the busy rmdir for its
// reserve only, removes the rest and the record, and says what it left;
// the node stays idle. Once the inner group is gone, the next --gym-otel
// job's prolog on the node removes the group left.
func TestEpilogLeavesBusyGroup(t *testing.T) {
	waitIdle(t)
	hs := nodeHierarchies(t)
	d := markerDir(t, "busygroup")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf("i=0; while [ ! -e %s/go ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i+1)); done\necho ran\n", d))
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	jobID := jobIDOf(t, r)
	rel := "gym_otel/" + clusterName() + "/gn1/job_" + jobID
	group := filepath.Join(hs[0].Mount, rel)
	inner := filepath.Join(group, "busy")
	t.Cleanup(func() {
		_ = os.Remove(inner)
		for _, h := range hs {
			_ = os.Remove(filepath.Join(h.Mount, rel))
		}
	})
	for deadline := time.Now().Add(patience); ; time.Sleep(200 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(group, "cgroup.procs")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no collector cgroup %s after %s", group, patience)
		}
	}
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJobsGone(t, patience, []string{jobID})
	waitIdle(t) // a drained node fails here

	var log string
	var m []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		log = slurmdLogs(t)
		m = regexp.MustCompile(`job ` + jobID + `: epilog done in (\d+) ms of its (\S+) deadline`).FindStringSubmatch(log)
		if m != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no epilog line for job %s in slurmd's log", jobID)
		}
	}
	ms, _ := strconv.Atoi(m[1])
	t.Logf("job %s: the epilog took %d ms of its %s deadline", jobID, ms, m[2])
	left := `job ` + jobID + `: cgroup ` + regexp.QuoteMeta(rel) + ` not ended by the deadline \(directories left: 1\), left for the next prolog's or epilog's sweep of orphaned cgroups: .*device or resource busy`
	if !regexp.MustCompile(left).MatchString(log) {
		t.Errorf("slurmd's log does not say the busy group was left (want /%s/)", left)
	}
	if _, err := os.Stat(group); err != nil {
		t.Fatalf("the busy group is gone: %v", err)
	}
	for _, h := range hs[1:] {
		if _, err := os.Stat(filepath.Join(h.Mount, rel)); !os.IsNotExist(err) {
			t.Errorf("the group on %s was not removed: %v", h.Mount, err)
		}
	}
	// The busy rmdir is retried for RemoveReserve; the drain of an idle
	// collector and the kill take well under the rest of the deadline.
	if dl, err := time.ParseDuration(m[2]); err == nil && time.Duration(ms)*time.Millisecond > dl {
		t.Errorf("the epilog took %d ms, past its %s deadline", ms, dl)
	}
	if time.Duration(ms)*time.Millisecond < timing.RemoveReserve-50*time.Millisecond {
		t.Errorf("the epilog took %d ms: it did not retry the busy rmdir for %s", ms, timing.RemoveReserve)
	}

	// The inner group gone, the next job's prolog sweeps the one left.
	if err := os.Remove(inner); err != nil {
		t.Fatal(err)
	}
	script2 := writeScript(t, filepath.Base(d)+"-2.sh", "true\n")
	r = asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run2 -o %s/job2.out %s", d, d, script2))
	if r.code != 0 {
		t.Fatalf("second job: exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(group); !os.IsNotExist(err) {
		t.Errorf("the group left is still there after the next job: %v", err)
	}
	if !regexp.MustCompile(`job \d+: removed the cgroup of job ` + jobID + `, which had no record on this node`).MatchString(slurmdLogs(t)) {
		t.Error("slurmd's log does not say the next prolog removed the group left")
	}
	waitNoCollector(t)
	waitIdle(t)
}
