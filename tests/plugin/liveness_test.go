package plugin_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// The slurmd of a job's second node is killed while the job runs there
// (no step on that node, so a restarted slurmd would find nothing of it),
// and the job is cancelled meanwhile: no epilog can run on that node, yet
// its collector does not outlive the job. While that slurmd ran, its
// supervisor asked Slurm nothing; once it is gone, the supervisor asks and
// drains when Slurm shows the job over. Then slurmd comes back and the
// cluster is idle.
func TestSlurmdGoneSupervisorAsks(t *testing.T) {
	waitIdle(t)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	script := writeScript(t, "sdgone-"+tag+".sh", "srun -N2 true\nsleep 300\n")
	id := jobIDOf(t, asUser(t, 30*time.Second, tokenEnv(), "sbatch -N2 --gym-otel -o /dev/null "+script))
	jid, _ := strconv.ParseUint(id, 10, 32)
	t.Cleanup(func() {
		run("scancel", id)
		if err := upCluster(); err != nil {
			t.Errorf("bringing slurmd back: %v", err)
		}
		waitIdle(t)
	})
	var rec *record.Record
	deadline := time.Now().Add(patience)
	for {
		r, err := record.Read(record.JobDir(recordDir, "gn2", uint32(jid)))
		if err == nil && r.Status == "ready" && r.SupervisorPID > 1 {
			rec = r
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: no ready record on gn2 after %v (%v)", id, patience, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	supLog := filepath.Join(jobsDir, "gym-otel-"+id, "otel", "nodes", "gn2", "supervisor.log")
	if data, _ := os.ReadFile(supLog); !strings.Contains(string(data), "the epilog of this node's slurmd ends the collector") {
		t.Fatalf("%s: the supervisor did not take the prolog's slurmd as its liveness:\n%s", supLog, data)
	}
	// The prolog, as root, named the node's slurmd binary by its path: the
	// only binary a later slurmd may run to be adopted.
	env, err := os.ReadFile("/proc/" + strconv.Itoa(rec.SupervisorPID) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	slurmdBin, err := filepath.EvalSymlinks("/usr/sbin/slurmd")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\x00"+string(env)+"\x00", "\x00GYM_OTEL_SLURMD_EXE="+slurmdBin+"\x00") {
		var names []string // names only: the environment may hold the token
		for _, kv := range strings.Split(string(env), "\x00") {
			if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GYM_OTEL_SLURMD") {
				names = append(names, k+"="+v)
			} else if k != "" {
				names = append(names, k)
			}
		}
		t.Errorf("the supervisor's environment does not name the slurmd binary %s: %v", slurmdBin, names)
	}
	pidFile := filepath.Join(stateDir, "run", "slurmd-gn2.pid")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	slurmd, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(slurmd, syscall.SIGKILL); err != nil {
		t.Fatalf("killing slurmd gn2 (pid %d): %v", slurmd, err)
	}
	killed := time.Now()
	if out, err := run("scancel", id); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	// The supervisor notices within one 30 s check, then asks until Slurm
	// shows the job over (gn2 is declared down after SlurmdTimeout=30 s).
	for syscall.Kill(rec.SupervisorPID, 0) == nil {
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(rec.SupervisorPID) + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Since(killed) > 5*time.Minute {
			t.Fatalf("job %s: gn2's supervisor (pid %d) still runs 5 minutes after its slurmd was killed and the job cancelled", id, rec.SupervisorPID)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("gn2's supervisor drained %v after its slurmd was killed", time.Since(killed).Round(time.Second))
	logData, _ := os.ReadFile(supLog)
	if !strings.Contains(string(logData), "Slurm no longer runs job "+id) {
		t.Errorf("%s: no drain because Slurm no longer runs the job:\n%s", supLog, logData)
	}
}
