package plugin_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The headline job: a vLLM stand-in scraped and a Gym stand-in sending
// OTLP with the task env only; the collector ready before the script's
// first line; the final scrape after its last line; data in the job's jsonl
// files and at the backend; exit code kept.
func TestTelemetryEndToEnd(t *testing.T) {
	waitIdle(t)
	vllm := testenv.Standin(t, "vllm-standin")
	gym := testenv.Standin(t, "gym-standin")
	for _, p := range []string{vllm, gym} {
		if out, err := run("install", "-m", "0755", p, filepath.Join(plugDir, filepath.Base(p))); err != nil {
			t.Fatalf("install %s: %v %s", p, err, out)
		}
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "e2e-"+tag)
	gymCfg := base + ".gym.yaml"
	if err := os.WriteFile(gymCfg, []byte(`compute:
  gymtest: {}
driver:
  gym_install: /opt/gym
job:
  output_path: `+base+`.run
services:
  policy:
    type: vllm
    port: `+vllmPort+`
    served_model_name: tiny-model
`), 0o644); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, "e2e-"+tag+".sh", fmt.Sprintf(`
date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ > %[1]s.first
%[2]s/vllm-standin --port %[3]s --model tiny-model --scrape-log %[1]s.scrapes &
for i in $(seq 1 1200); do curl -sf http://127.0.0.1:%[3]s/health >/dev/null && break; sleep 0.1; done
%[2]s/gym-standin --rollouts 3 || exit 9
date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ > %[1]s.last
exit 5
`, base, plugDir, vllmPort))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait --gym-otel=config=%s,benchmark=bench1 -o %s.out %s", gymCfg, base, script))
	if r.code != 5 {
		out, _ := os.ReadFile(base + ".out")
		t.Fatalf("exit %d (want 5); stderr %s\n%s", r.code, r.stderr, out)
	}
	jobID := jobIDOf(t, r)
	// sbatch --wait returns once the job's state is final, which Slurm
	// sets while the epilog still runs (COMPLETING): the files are whole
	// once the epilog has drained the collector.
	waitNoCollector(t)
	otelDir := filepath.Join(base+".run", "otel")
	state, err := os.ReadFile(filepath.Join(otelDir, "collector.log"))
	if err != nil {
		t.Fatal(err)
	}
	_ = state
	first := testenv.ReadTime(t, base+".first")
	last := testenv.ReadTime(t, base+".last")
	// Ready before the first line: the prolog waited for the report.
	log := slurmdLogs(t)
	m := regexp.MustCompile(`\[([0-9T:.-]+)\] gym-otel: job ` + jobID + `: collector ready on gn1`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no ready line for job %s in slurmd logs", jobID)
	}
	ready, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
	if err != nil {
		t.Fatal(err)
	}
	if !ready.Before(first) {
		t.Errorf("collector ready at %v, script's first line at %v", ready, first)
	}
	// Final scrape after the last line.
	scrapes, _ := os.ReadFile(base + ".scrapes")
	lines := strings.Fields(string(scrapes))
	if len(lines) == 0 {
		t.Fatal("vllm-standin was never scraped")
	}
	lastScrape, err := time.Parse(time.RFC3339Nano, lines[len(lines)-1])
	if err != nil {
		t.Fatal(err)
	}
	if !lastScrape.After(last) {
		t.Errorf("last scrape %v is not after the script's last line %v", lastScrape, last)
	}
	metrics, _ := os.ReadFile(filepath.Join(otelDir, "metrics.jsonl"))
	traces, _ := os.ReadFile(filepath.Join(otelDir, "traces.jsonl"))
	for what, want := range map[string]string{"vllm metric": "vllm_num_requests_running", "gym metric": "gym.rollout.duration_ms"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("%s %s not in metrics.jsonl", what, want)
		}
	}
	if !strings.Contains(string(traces), "gym.rollout") {
		t.Errorf("no gym.rollout span in traces.jsonl")
	}
	// The backend has this job's vLLM metrics: a batch line naming both
	// (the backend's file holds every job of the suite).
	be, _ := os.ReadFile(filepath.Join(backendDir, "metrics.jsonl"))
	found := false
	for _, line := range strings.Split(string(be), "\n") {
		if strings.Contains(line, `"`+jobID+`"`) && strings.Contains(line, "vllm_num_requests_running") {
			found = true
			break
		}
	}
	if !found {
		t.Errorf("the backend received no vLLM metric of job %s", jobID)
	}
	waitIdle(t)
}

// An array job: three run ids and three dirs. The tasks run one at a time
// here (%1); TestSimultaneousStarts starts three collectors at once.
func TestArrayJob(t *testing.T) {
	testArray(t, "0-2%1")
}

// Three array tasks starting at once on one node: three collectors, no
// port clash.
func TestSimultaneousStarts(t *testing.T) {
	testArray(t, "0-2")
}

func testArray(t *testing.T, spec string) {
	waitIdle(t)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "arr-"+tag)
	script := writeScript(t, "arr-"+tag+".sh", fmt.Sprintf("echo $NEMO_GYM_OTEL_RUN_ID > %s.$SLURM_ARRAY_TASK_ID.runid\n", base))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --array=%s --gym-otel=job_dir=%s/%%A_%%a,run_id=r%%A_%%a -o /dev/null %s", spec, base, script))
	if r.code != 0 {
		t.Fatalf("sbatch: %d %s", r.code, r.stderr)
	}
	arrayID := jobIDOf(t, r)
	for i := 0; i < 3; i++ {
		data, err := os.ReadFile(fmt.Sprintf("%s.%d.runid", base, i))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.TrimSpace(string(data)), fmt.Sprintf("r%s_%d", arrayID, i); got != want {
			t.Errorf("task %d: run id %q, want %q", i, got, want)
		}
		if _, err := os.Stat(filepath.Join(base, fmt.Sprintf("%s_%d", arrayID, i), "otel", "collector.yaml")); err != nil {
			t.Errorf("task %d: %v", i, err)
		}
	}
	waitNoCollector(t)
	waitIdle(t)
}

// Two jobs of one user on one node: distinct collectors; the first job's
// end leaves the second's running.
func TestConcurrentJobs(t *testing.T) {
	waitIdle(t)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "conc-"+tag)
	// Job a ends by itself; job b runs until the test releases it (at most
	// 10 minutes), whatever a's start, end and epilog take.
	release := base + ".release"
	mk := func(name, wait string) string {
		return writeScript(t, fmt.Sprintf("conc-%s-%s.sh", tag, name), fmt.Sprintf(
			"echo $OTEL_EXPORTER_OTLP_ENDPOINT > %s.%s.ep\n%s\n", base, name, wait))
	}
	a := jobIDOf(t, asUser(t, 30*time.Second, tokenEnv(), "sbatch -w gn1 --gym-otel -o /dev/null "+mk("a", "true")))
	b := jobIDOf(t, asUser(t, 30*time.Second, tokenEnv(), "sbatch -w gn1 --gym-otel -o /dev/null "+
		mk("b", "for i in $(seq 6000); do [ -e "+release+" ] && break; sleep 0.1; done")))
	t.Cleanup(func() { os.WriteFile(release, nil, 0o644) })
	// Wait until a is done (its epilog too: it leaves the queue after it)
	// and b's script runs: squeue says RUNNING while b's prolog still
	// starts its collector, and the script's first line (b's endpoint
	// file) comes after the prolog has written b's record.
	deadline := time.Now().Add(patience)
	for {
		q, _ := run("squeue", "-h", "-o", "%i %T")
		ep, _ := os.ReadFile(base + ".b.ep")
		if !strings.Contains(q, a+" ") && strings.Contains(q, b+" RUNNING") && len(ep) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue: %s", q)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ea, _ := os.ReadFile(base + ".a.ep")
	eb, _ := os.ReadFile(base + ".b.ep")
	if len(ea) == 0 || string(ea) == string(eb) {
		t.Errorf("endpoints a=%q b=%q", ea, eb)
	}
	if _, err := os.Stat(filepath.Join(recordDir, "gn1", b, "record")); err != nil {
		t.Errorf("job b's record: %v", err)
	}
	// a's epilog has ended (a left the queue): only b's collector runs.
	if procs := userProcs("otelcol-gym"); len(procs) != 1 {
		t.Errorf("collectors running while only job b runs: %v", procs)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJobState(t, b, patience, "COMPLETED")
	waitNoCollector(t)
	waitIdle(t)
}

// default=on: a job without the flag gets a collector; without the token it
// runs without one after one warning; --gym-otel=off opts out.
func TestDefaultOn(t *testing.T) {
	waitIdle(t)
	withSnippet(t, strings.TrimSpace(goodConf)+" default=on\n")
	base := filepath.Join(jobsDir, "defon")
	script := writeScript(t, "defon.sh", fmt.Sprintf("echo ${OTEL_EXPORTER_OTLP_ENDPOINT:-none} > %s.$SLURM_JOB_ID\n", base))
	check := func(env []string, flag, want string) {
		t.Helper()
		r := asUser(t, 60*time.Second, env, "sbatch --wait "+flag+" -o /dev/null "+script)
		if r.code != 0 {
			t.Fatalf("sbatch %s: %d %s", flag, r.code, r.stderr)
		}
		data, _ := os.ReadFile(base + "." + jobIDOf(t, r))
		got := strings.TrimSpace(string(data))
		if want == "none" && got != "none" || want != "none" && !strings.HasPrefix(got, want) {
			t.Errorf("sbatch %s %v: endpoint %q, want %q", flag, env, got, want)
		}
		if len(env) == 0 && !strings.Contains(r.stderr, "gym-otel: warning: the job runs without a collector") {
			t.Errorf("no warning: %s", r.stderr)
		}
	}
	check(tokenEnv(), "", "http://127.0.0.1:")
	check(nil, "", "none")
	check(tokenEnv(), "--gym-otel=off", "none")
	waitNoCollector(t)
	waitIdle(t)
}

// 200 steps with the flag inside one flagged job: every exit code intact.
func TestSoakSteps(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	waitIdle(t)
	out := filepath.Join(jobsDir, "soak.out")
	script := writeScript(t, "soak.sh", `
bad=0
for i in $(seq 200); do
  srun -N1 --gym-otel sh -c "test -n \"\$OTEL_EXPORTER_OTLP_ENDPOINT\" || exit 99; exit $((i % 7))"
  rc=$?
  [ $rc -eq $((i % 7)) ] || { echo "BAD step $i rc=$rc"; bad=1; }
done
echo done bad=$bad
`)
	start := time.Now()
	r := asUser(t, 300*time.Second, tokenEnv(), "sbatch --wait --gym-otel -o "+out+" "+script)
	data, _ := os.ReadFile(out)
	if r.code != 0 || !strings.Contains(string(data), "done bad=0") {
		t.Fatalf("soak: exit %d\n%s", r.code, data)
	}
	t.Logf("200 steps in %v", time.Since(start))
	waitNoCollector(t)
	waitIdle(t)
}

// scancel while the batch step waits for the final scrape: the job ends,
// no node drains, nothing is left.
func TestScancelDuringFinalWait(t *testing.T) {
	waitIdle(t)
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	done := filepath.Join(jobsDir, "fw-"+tag+".done")
	// scrape_interval_seconds=29: the batch step waits 30 s (the most it
	// waits) after the script; on two nodes, with gn2's peer file removed
	// by the script (as if the job dir were not shared), it holds the
	// whole wait (told at once, every node's final scrape would end it
	// early; a job with no scrape target would hold none). The
	// scancel comes once the wait is logged, well within it on a loaded
	// machine.
	jobDir := filepath.Join(jobsDir, "fw-"+tag+".run")
	script := writeScript(t, "fw-"+tag+".sh", fmt.Sprintf("rm %s || exit 7\ntouch %s\n", filepath.Join(jobDir, "otel", "nodes", "gn2", supervise.PeerFile), done))
	id := jobIDOf(t, asUser(t, 30*time.Second, tokenEnv(), "sbatch -N2 --gym-otel=scrape_interval_seconds=29,job_dir="+jobDir+" -o /dev/null "+script))
	waitFile(t, 60*time.Second, done)
	for deadline := time.Now().Add(patience); !strings.Contains(slurmdLogs(t), "job "+id+": batch script done, waiting 30 s"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no final-scrape wait logged for job %s", id)
		}
	}
	start := time.Now()
	if out, err := run("scancel", id); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	waitNoCollector(t)
	waitIdle(t)
	t.Logf("job gone and nodes idle %v after scancel", time.Since(start))
	if !strings.Contains(slurmdLogs(t), "job "+id+": the job is ending (cancelled or out of time): final-scrape wait cut short") {
		t.Errorf("job %s: the final-scrape wait was not cut short by scancel", id)
	}
}

// A job that hits its time limit: Slurm ends it (TIMEOUT), the epilog
// drains the collector, every jsonl line parses, nothing is left, the node
// is idle. The limit is lowered with scontrol once the script runs (Slurm's
// smallest --time is a minute); slurmctld enforces it within its periodic
// check (Slurm counts limits in whole minutes: about 90 s in all).
func TestTimeLimit(t *testing.T) {
	waitIdle(t)
	gym := testenv.Standin(t, "gym-standin")
	if out, err := run("install", "-m", "0755", gym, filepath.Join(plugDir, "gym-standin")); err != nil {
		t.Fatalf("install %s: %v %s", gym, err, out)
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	ready := filepath.Join(jobsDir, "tl-"+tag+".ready")
	jobDir := filepath.Join(jobsDir, "otel-tl-"+tag)
	script := writeScript(t, "tl-"+tag+".sh", fmt.Sprintf("srun -N1 %s/gym-standin --rollouts 2 || exit 9\ntouch %s\nsleep 600\n", plugDir, ready))
	id := jobIDOf(t, asUser(t, 30*time.Second, tokenEnv(),
		fmt.Sprintf("sbatch --time=10 --gym-otel=job_dir=%s,scrape_interval_seconds=1 -o /dev/null %s", jobDir, script)))
	waitFile(t, 60*time.Second, ready)
	if out, err := run("scontrol", "update", "JobId="+id, "TimeLimit=0:01"); err != nil {
		t.Fatalf("scontrol update: %v %s", err, out)
	}
	start := time.Now()
	waitJobState(t, id, 5*time.Minute, "TIMEOUT")
	t.Logf("TIMEOUT %v after the limit was lowered", time.Since(start))
	waitNoCollector(t)
	waitIdle(t)
	lines := jsonlLines(t, filepath.Join(jobDir, "otel"))
	if lines["traces.jsonl"] == 0 {
		t.Errorf("no spans in %s/otel/traces.jsonl: %v", jobDir, lines)
	}
	if ents, _ := filepath.Glob(filepath.Join(recordDir, "*", id)); len(ents) > 0 {
		t.Errorf("record dirs left: %v", ents)
	}
}

// A record left by a job whose epilog never ran on the node (the node died
// and came back with /run intact): the next job's prolog removes it, and
// the control socket file beside it, once slurmctld says that job is over,
// and leaves a live job's record alone.
func TestStaleRecordSwept(t *testing.T) {
	waitIdle(t)
	stale := record.JobDir(recordDir, "gn1", 999001)
	if _, err := record.MakeJobDir(recordDir, "gn1", 999001); err != nil {
		t.Fatal(err)
	}
	// The crashed job's control socket, its listener long gone.
	hold, err := record.MakeControlDir(stale)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: hold, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	// A supervisor pid that is not the recorded process (start time 1).
	if err := record.Write(stale, &record.Record{Status: "ready", OnFailure: "continue", UID: 2001,
		SupervisorPID: os.Getpid(), SupervisorStart: 1, ControlSocket: hold}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(stale) })
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	script := writeScript(t, "sweep-"+tag+".sh", "true\n")
	r := asUser(t, 60*time.Second, tokenEnv(), "sbatch --wait -w gn1 --gym-otel -o /dev/null "+script)
	if r.code != 0 {
		t.Fatalf("sbatch: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("%s: the stale record is still there", stale)
	}
	if _, err := os.Lstat(hold); err == nil {
		t.Errorf("%s: the stale control socket is still there", hold)
	}
	if !strings.Contains(slurmdLogs(t), "removed the stale record of job 999001") {
		t.Errorf("no log line for the stale record")
	}
	waitNoCollector(t)
	waitIdle(t)
}

// Three stale records of jobs slurmctld does not know: one prolog asks
// about two of them (callbacks.MaxSweepQueries) and removes those, leaves the
// third for a later prolog and says so; the next job's prolog removes it.
func TestStaleRecordSweepBounded(t *testing.T) {
	waitIdle(t)
	var stale []string
	for _, id := range []uint32{999101, 999102, 999103} {
		dir := record.JobDir(recordDir, "gn1", id)
		if _, err := record.MakeJobDir(recordDir, "gn1", id); err != nil {
			t.Fatal(err)
		}
		if err := record.Write(dir, &record.Record{Status: "ready", OnFailure: "continue", UID: 2001,
			SupervisorPID: os.Getpid(), SupervisorStart: 1}); err != nil {
			t.Fatal(err)
		}
		stale = append(stale, dir)
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	left := func() int {
		n := 0
		for _, d := range stale {
			if _, err := os.Stat(d); err == nil {
				n++
			}
		}
		return n
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	script := writeScript(t, "sweepb-"+tag+".sh", "true\n")
	for i, want := range []int{1, 0} {
		r := asUser(t, 60*time.Second, tokenEnv(), "sbatch --wait -w gn1 --gym-otel -o /dev/null "+script)
		if r.code != 0 {
			t.Fatalf("sbatch: %d %s %s", r.code, r.stdout, r.stderr)
		}
		if got := left(); got != want {
			t.Errorf("after job %d: %d stale records left, want %d", i+1, got, want)
		}
		waitIdle(t)
	}
	if !strings.Contains(slurmdLogs(t), "is left for a later prolog (2 questions to slurmctld per prolog)") {
		t.Errorf("no log line for the record left for a later prolog")
	}
	waitNoCollector(t)
}
