package plugin_test

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// withCollectorWaitStep brings the cluster up with collector_wait=step on
// the plugstack line (PrologFlags=Alloc,Contain: the extern step runs and
// must not hold the batch step's launch) for one test.
func withCollectorWaitStep(t *testing.T) {
	t.Helper()
	withClusterConf(t, strings.TrimRight(goodConf, "\n")+" collector_wait=step\n", "--prolog-flags", "Alloc,Contain")
}

// logStamp is the time of slurmd's first log line matching re ([ms] stamps).
func logStamp(t *testing.T, log string, re *regexp.Regexp) (time.Time, bool) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		m := regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)$`).FindStringSubmatch(line)
		if m == nil || !re.MatchString(m[2]) {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
		if err != nil {
			t.Fatal(err)
		}
		return at, true
	}
	return time.Time{}, false
}

// TestCollectorWaitStep: with collector_wait=step the job prolog returns
// before the collector is ready (slurmd logs the prolog's end before the
// collector's ready line) and the batch step waits for it: at the
// script's first line the collector is ready and its OTLP port answers,
// the task env is set (no token), a second step gets it too, the Gym
// stand-in's spans reach the job's traces.jsonl, the epilog drains it
// (receipt) and leaves no supervisor, collector, record dir or start lock.
// on_failure=fail still fails the job when the collector cannot start, and
// on_failure=continue runs it without the env.
func TestCollectorWaitStep(t *testing.T) {
	withCollectorWaitStep(t)
	base, script := stepsScript(t, "cwait")
	jobDir := base + ".run"
	r := asUser(t, 180*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 -w gn1 --wait --gym-otel=job_dir=%s,run_id=cwait-%%j -o %s.out %s", jobDir, base, script))
	if r.code != 5 {
		out, _ := os.ReadFile(base + ".out")
		t.Fatalf("exit %d (want 5); stderr %s\n%s", r.code, r.stderr, out)
	}
	jobID := jobIDOf(t, r)
	if p, _ := os.ReadFile(base + ".port"); strings.TrimSpace(string(p)) != "up" {
		t.Errorf("the collector's OTLP port at the script's first line: %q", p)
	}
	first := testenv.ReadTime(t, base+".first")
	log := slurmdLogs(t)
	prologStart, ok1 := logStamp(t, log, regexp.MustCompile(`Running spank/prolog for jobid \[`+jobID+`\]`))
	prologEnd, ok2 := logStamp(t, log, regexp.MustCompile(`Finished wait for job `+jobID+`'s prolog to complete`))
	ready, ok3 := logStamp(t, log, regexp.MustCompile(`gym-otel: job `+jobID+`: collector ready on gn1`))
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("job %s: slurmd's log lacks the prolog's start (%v), its end (%v) or the ready line (%v)", jobID, ok1, ok2, ok3)
	}
	t.Logf("job %s: prolog %v; collector ready %v after the prolog's start; script's first line %v after it",
		jobID, prologEnd.Sub(prologStart), ready.Sub(prologStart), first.Sub(prologStart).Round(time.Millisecond))
	if !prologEnd.Before(ready) {
		t.Errorf("the prolog ended at %v, not before the collector was ready (%v): nothing overlapped", prologEnd, ready)
	}
	if !ready.Before(first) {
		t.Errorf("collector ready at %v, after the script's first line at %v", ready, first)
	}
	checkStepsJob(t, base, jobDir, "cwait-"+jobID)
	checkNothingLeft(t, jobID)

	// The collector cannot start: on_failure=fail fails the job (the
	// script never runs), continue runs it without the env.
	out := base + "-fail"
	plain := writeScript(t, filepath.Base(base)+"-fail.sh", fmt.Sprintf("env > %s.env\n", out))
	failed, continued := checkCollectorFailure(t, out, plain, "-w gn1")
	waitIdle(t)
	checkNothingLeft(t, failed)
	checkNothingLeft(t, continued)
}

// TestCollectorWaitStepCancel: with collector_wait=step, a job cancelled
// while its collector starts (scancel as soon as the start lock exists)
// ends; the epilog waits for the start and stops what it started: no
// supervisor or collector, record dir or start lock is left, and no node
// drains. A start lock that is not root's (planted before the job) is not
// trusted: the prolog starts the collector itself and the job gets it.
func TestCollectorWaitStepCancel(t *testing.T) {
	withCollectorWaitStep(t)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	script := writeScript(t, "cwait-cancel-"+tag+".sh", "sleep 60\n")
	var ids []string
	for i := 0; i < 3; i++ {
		id := jobIDOf(t, asUser(t, 30*time.Second, tokenEnv(), "sbatch -w gn1 -o /dev/null --gym-otel "+script))
		lock := filepath.Join(recordDir, "gn1", ".start-"+id+".lock")
		deadline := time.Now().Add(patience)
		for {
			if _, err := os.Lstat(lock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s: no start lock %s", id, lock)
			}
			time.Sleep(2 * time.Millisecond)
		}
		if out, err := run("scancel", id); err != nil {
			t.Fatalf("scancel: %v %s", err, out)
		}
		waitJobsGone(t, patience, []string{id})
		waitNoCollector(t)
		waitIdle(t)
		checkNothingLeft(t, id)
		ids = append(ids, id)
	}
	// At least one epilog came while its start ran, and waited for it
	// (slurmd logs at debug level here).
	waited := 0
	log := slurmdLogs(t)
	for _, id := range ids {
		if regexp.MustCompile(`gym-otel: job ` + id + `: epilog: waited \d+ ms for the collector's start`).MatchString(log) {
			waited++
		}
	}
	t.Logf("%d of %d cancelled jobs' epilogs waited for their collector's start", waited, len(ids))
	if waited == 0 {
		t.Errorf("no epilog of jobs %v waited for the collector's start: none was cancelled while it ran", ids)
	}

	// A start lock of the job's user, as if planted: held to the job
	// (sbatch --hold), planted, released.
	base := filepath.Join(jobsDir, "cwait-planted-"+tag)
	envScript := writeScript(t, "cwait-planted-"+tag+".sh", "env > "+base+".env\n")
	id := jobIDOf(t, asUser(t, 30*time.Second, tokenEnv(), "sbatch --hold -w gn1 -o /dev/null --gym-otel "+envScript))
	lock := filepath.Join(recordDir, "gn1", ".start-"+id+".lock")
	if err := os.MkdirAll(filepath.Dir(lock), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(lock) })
	u, err := user.Lookup(kit.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	if err := os.Chown(lock, uid, -1); err != nil {
		t.Fatal(err)
	}
	if out, err := run("scontrol", "release", id); err != nil {
		t.Fatalf("scontrol release: %v %s", err, out)
	}
	waitJobsGone(t, 2*patience, []string{id})
	waitNoCollector(t)
	waitIdle(t)
	data, err := os.ReadFile(base + ".env")
	if err != nil {
		t.Fatal(err)
	}
	if e := testenv.EnvOf(string(data)); !strings.HasPrefix(e["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://127.0.0.1:") {
		t.Errorf("planted start lock: the job got no collector (endpoint %q)", e["OTEL_EXPORTER_OTLP_ENDPOINT"])
	}
	if !strings.Contains(slurmdLogs(t), "job "+id+": collector_wait=step: the prolog starts the collector itself") {
		t.Errorf("planted start lock: no line saying the prolog started the collector itself")
	}
}

// checkNothingLeft fails t when job id left a record dir or a start lock
// on a node.
func checkNothingLeft(t *testing.T, id string) {
	t.Helper()
	if ents, _ := filepath.Glob(filepath.Join(recordDir, "*", id)); len(ents) > 0 {
		t.Errorf("job %s: record dirs left: %v", id, ents)
	}
	if ents, _ := filepath.Glob(filepath.Join(recordDir, "*", ".start-"+id+".lock")); len(ents) > 0 {
		t.Errorf("job %s: start locks left: %v", id, ents)
	}
}

// checkStepsJob checks a job of stepsScript's once it has ended: the task
// envs (checkStepEnvs), no supervisor or collector left and the nodes
// idle, the Gym stand-in's spans in jobDir's traces.jsonl and the drain's
// receipt.
func checkStepsJob(t *testing.T, base, jobDir, runID string) {
	t.Helper()
	checkStepEnvs(t, base, runID)
	waitNoCollector(t)
	waitIdle(t)
	traces, _ := os.ReadFile(filepath.Join(jobDir, "otel", "traces.jsonl"))
	if !strings.Contains(string(traces), "gym.rollout") {
		t.Errorf("no gym.rollout span in the job's traces.jsonl (%d bytes)", len(traces))
	}
	if rc, err := os.ReadFile(filepath.Join(jobDir, "otel", "receipt.json")); err != nil {
		t.Errorf("no receipt (the drain did not run?): %v", err)
	} else {
		t.Logf("receipt: %d bytes", len(rc))
	}
}

// checkStepEnvs checks the task env a job script wrote to base.batch.env
// (the batch step) and base.step.env (an srun step): the run id runID, the
// collector's endpoint on loopback, and no backend token.
func checkStepEnvs(t *testing.T, base, runID string) {
	t.Helper()
	for _, f := range []string{".batch.env", ".step.env"} {
		data, err := os.ReadFile(base + f)
		if err != nil {
			t.Error(err)
			continue
		}
		if strings.Contains(string(data), backendToken) {
			t.Errorf("%s: the backend token is in the task env", f)
		}
		env := testenv.EnvOf(string(data))
		if env["NEMO_GYM_OTEL_RUN_ID"] != runID || !strings.HasPrefix(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://127.0.0.1:") {
			t.Errorf("%s: run id %q (want %q), endpoint %q", f, env["NEMO_GYM_OTEL_RUN_ID"], runID, env["OTEL_EXPORTER_OTLP_ENDPOINT"])
		}
	}
}

// stepsScript installs the Gym stand-in in the plugin dir and writes a job
// script that stamps its first line (base.first), says whether the
// collector's OTLP port answers then (base.port: "up"), writes the batch
// step's and an srun step's env (base.batch.env, base.step.env), runs the
// Gym stand-in (exit 9 when it fails) and exits 5. It returns base (in the
// jobs dir, named after prefix) and the script's path.
func stepsScript(t *testing.T, prefix string) (base, script string) {
	t.Helper()
	gym := testenv.Standin(t, "gym-standin")
	if out, err := run("install", "-m", "0755", gym, filepath.Join(plugDir, "gym-standin")); err != nil {
		t.Fatalf("install %s: %v %s", gym, err, out)
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base = filepath.Join(jobsDir, prefix+"-"+tag)
	script = writeScript(t, prefix+"-"+tag+".sh", fmt.Sprintf(`
date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ > %[1]s.first
port=${OTEL_EXPORTER_OTLP_ENDPOINT##*:}
if (exec 3<>/dev/tcp/127.0.0.1/${port:-1}) 2>/dev/null; then echo up > %[1]s.port; else echo "down ${OTEL_EXPORTER_OTLP_ENDPOINT:-unset}" > %[1]s.port; fi
env > %[1]s.batch.env
srun -N1 bash -c 'env > %[1]s.step.env'
%[2]s/gym-standin --rollouts 3 || exit 9
exit 5
`, base, plugDir))
	return base, script
}
