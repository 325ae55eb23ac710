package slurmdocker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
)

// waitFile waits (bounded: within, at least patience) until every path
// exists.
func waitFile(t *testing.T, within time.Duration, paths ...string) {
	t.Helper()
	slurmkit.WaitFile(t, within, paths...)
}

// vllmOnBothNodes is the start of a two-node job script: D is the job dir,
// a vLLM stand-in runs on c1 and c2 (port 8000) until the job ends, and
// $D/ready appears once each has been scraped.
func vllmOnBothNodes(dir string) string {
	return fmt.Sprintf(`#!/bin/bash
D=%[1]s
srun -N2 --ntasks-per-node=1 --overlap bash -c 'exec %[2]s/vllm-standin --port 8000 --model tiny-model --scrape-log %[1]s/scrapes.$SLURMD_NODENAME' &
for i in $(seq 1 1200); do [ -s $D/scrapes.c1 ] && [ -s $D/scrapes.c2 ] && break; sleep 0.1; done
touch $D/ready
`, dir, standins)
}

// TestFaultCollectorBackendStopped: with otel.delivery=collector (the
// collector's own exporter; the default delivery from the files is tested
// against a backend down in tests/plugin and helper/supervise), the
// backend stops mid-job: the collectors' exports fail while the job
// runs (state.json says so on both nodes), the job finishes with its drain
// complete within the epilog's wait (state.json drained, a receipt with
// final figures), the local files are complete, and the refusal is
// reported once per node (collector.log and state.json), not per batch.
func TestFaultCollectorBackendStopped(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "backend-stopped")
	writeFile(t, filepath.Join(host, "job.sh"), vllmOnBothNodes(dir)+fmt.Sprintf(`for i in $(seq 1 1800); do [ -e $D/go ] && break; sleep 0.1; done
%[1]s/gym-standin --rollouts 3 --sandbox-provider docker --flush-timeout 10s || exit 92
# Until the collectors' exports to the stopped backend have failed (after
# their retries: export_timeout_seconds 5, six times that in all) and each
# node's supervisor has said so in its state.json.
for i in $(seq 1 1800); do
  grep -qs '"export_problems"' $D/otel/state.json && grep -qs '"export_problems"' $D/otel/nodes/c2/state.json && exit 0
  sleep 0.1
done
exit 94
`, standins), 0o755)
	stageConfig(t, host, dir)
	id := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf("-N2 --gym-otel=config=%s/submit.yaml,delivery=collector -o %s/slurm-%%j.out job.sh", dir, dir))
	waitFile(t, 60*time.Second, filepath.Join(host, "ready"))
	if out, err := run("docker", "stop", "-t", "2", c.project+"-backend"); err != nil {
		t.Fatalf("docker stop backend: %v %s", err, out)
	}
	t.Cleanup(func() { c.startBackend(t) })
	start := time.Now()
	writeFile(t, filepath.Join(host, "go"), "", 0o644)
	state, exit := c.waitJob(t, id, 5*time.Minute)
	took := time.Since(start)
	out, _ := os.ReadFile(filepath.Join(host, "slurm-"+id+".out"))
	t.Logf("job %s: %s %s %v after the backend stopped; output:\n%s", id, state, exit, took.Round(time.Millisecond), out)
	if state != "COMPLETED" || exit != "0:0" {
		t.Fatalf("job %s: %s %s, want COMPLETED 0:0", id, state, exit)
	}
	// The drain's bound: each node's state.json says drained and its
	// receipt has final figures (below), which the supervisor writes only
	// when its drain ended before the epilog's wait did.
	c.waitNothingLeft(t, id)
	c.waitIdle(t, 30*time.Second)
	for n, d := range map[string]string{"c1": filepath.Join(host, "otel"), "c2": filepath.Join(host, "otel", "nodes", "c2")} {
		var all []item
		for _, sig := range []string{"metrics", "traces", "logs"} {
			all = append(all, readOTLP(t, filepath.Join(d, sig+".jsonl"))...) // fails on a partial line
		}
		if len(find(all, metricNamed("vllm_num_requests_running"))) == 0 {
			t.Errorf("%s: no vLLM metrics in the local files", n)
		}
		if n == "c1" {
			if k := len(find(all, func(it item) bool { return it.signal == "span" && it.name == "gym.rollout" })); k != 3 {
				t.Errorf("c1: %d gym.rollout spans in traces.jsonl, want 3", k)
			}
		}
		st, _ := os.ReadFile(filepath.Join(d, "state.json"))
		if !strings.Contains(string(st), `"drained"`) || !strings.Contains(string(st), `"export_problems"`) {
			t.Errorf("%s: state.json does not report the refusal: %s", n, st)
		}
		lg, _ := os.ReadFile(filepath.Join(d, "collector.log"))
		if k := strings.Count(string(lg), " gym-otel: the backend"); k != 1 {
			t.Errorf("%s: collector.log has %d gym-otel: reports, want 1", n, k)
		}
		// The receipt: final figures, what the backend missed, and every
		// item the file holds either sent or counted as failed.
		rc, err := receipt.Read(d)
		if err != nil {
			t.Error(err)
			continue
		}
		t.Logf("%s:\n%s", n, strings.Join(rc.Summary(), "\n"))
		have := countOf(all)
		// The drain's and the epilog's spans, appended after the
		// collector's exit, are the receipt's own (Appended).
		have["traces"] -= rc.AppendedSpans()
		have["metrics"] -= rc.AppendedPoints() // their span metrics
		lost := int64(0)
		for _, sig := range []string{"traces", "metrics", "logs"} {
			c := rc.Signals[sig]
			lost += c.Lost()
			if c.Written != have[sig] || c.Sent+c.Lost() != c.Written+c.FileFiltered {
				t.Errorf("%s: receipt %s %+v: want written = %d (the file's items), sent + failed = written + filtered out of the file", n, sig, c, have[sig])
			}
		}
		if !rc.Complete() || lost == 0 || !strings.Contains(strings.Join(rc.Summary(), "\n"), "LOST: the backend did not get") {
			t.Errorf("%s: the receipt does not say what the backend missed: %+v", n, rc)
		}
	}
	checkInspectBackendDown(t, host)

	// The backend is back: replay, as the job's user with the token in
	// OTEL_TOKEN as at submit, sends both nodes' files; the backend then
	// holds every span, metric point and log record of the files once more.
	c.startBackend(t)
	files := map[string]int64{}
	for _, d := range []string{filepath.Join(host, "otel"), filepath.Join(host, "otel", "nodes", "c2")} {
		var all []item
		for _, sig := range []string{"metrics", "traces", "logs"} {
			all = append(all, readOTLP(t, filepath.Join(d, sig+".jsonl"))...)
		}
		for k, v := range countOf(all) {
			files[k] += v
		}
	}
	before := c.backendCount(t, id)
	r := c.asUser(t, 180*time.Second, c.tokenEnv(), dir, "gym-otel-spank replay "+dir)
	t.Logf("replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, "replay complete") {
		t.Fatalf("replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var got map[string]int64
	deadline := time.Now().Add(patience)
	for {
		after := c.backendCount(t, id)
		got = map[string]int64{}
		for k := range files {
			got[k] = after[k] - before[k]
		}
		if fmt.Sprint(got) == fmt.Sprint(files) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if fmt.Sprint(got) != fmt.Sprint(files) {
		t.Errorf("the replay added %v to the backend for job %s; the files hold %v", got, id, files)
	}
}

// countOf counts items by signal: spans, metric data points, log records.
func countOf(all []item) map[string]int64 {
	n := map[string]int64{"traces": 0, "metrics": 0, "logs": 0}
	for _, it := range all {
		switch it.signal {
		case "span":
			n["traces"]++
		case "log":
			n["logs"]++
		case "metric":
			n["metrics"] += int64(len(it.attrs))
		}
	}
	return n
}

// backendCount counts the backend's items of job id by signal.
func (c *cluster) backendCount(t *testing.T, id string) map[string]int64 {
	var all []item
	for _, sig := range []string{"metrics", "traces", "logs"} {
		all = append(all, readOTLPLenient(t, filepath.Join(c.work, "backend", sig+".jsonl"))...)
	}
	return countOf(find(all, func(it item) bool { return it.res["slurm_job_id"] == id }))
}

// startBackend starts the backend container again and waits for its health.
func (c *cluster) startBackend(t *testing.T) {
	if out, err := run("docker", "start", c.project+"-backend"); err != nil {
		t.Errorf("docker start backend: %v %s", err, out)
		return
	}
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		if _, err := c.on("backend", "curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:13133/"); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("the backend is not healthy again")
}

// scancel while both nodes' prologs wait for a collector that takes 20 s
// to start: nothing is left behind, no node drains.
func TestFaultScancelDuringHealthWait(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "scancel-prolog")
	// A collector that answers --version at once but starts 20 s late.
	writeFile(t, filepath.Join(host, "slowcol"), fmt.Sprintf(`#!/bin/sh
case "$1" in --version) exec /usr/bin/otelcol-gym "$@" ;; esac
touch %s/started.$(hostname)
sleep 20
exec /usr/bin/otelcol-gym "$@"
`, dir), 0o755)
	writeFile(t, filepath.Join(host, "job.sh"), "#!/bin/bash\ntouch "+dir+"/ran\n", 0o755)
	id := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf("-N2 --gym-otel=job_dir=%s/out,binary=%s/slowcol -o %s/slurm-%%j.out job.sh", dir, dir, dir))
	waitFile(t, 60*time.Second, filepath.Join(host, "started.c1"), filepath.Join(host, "started.c2"))
	if st, _ := c.on("ctl", "squeue", "-h", "-j", id, "-o", "%T"); !strings.Contains(st, "CONFIGURING") && !strings.Contains(st, "RUNNING") {
		t.Logf("job %s state before scancel: %s", id, st)
	}
	start := time.Now()
	if out, err := c.on("ctl", "scancel", id); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	state, _ := c.waitJob(t, id, 90*time.Second)
	if state != "CANCELLED" {
		t.Errorf("job %s: %s, want CANCELLED", id, state)
	}
	c.waitNothingLeft(t, id)
	c.waitIdle(t, 60*time.Second)
	t.Logf("job %s cancelled in its prolog: nothing left and nodes idle %v after scancel", id, time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(host, "ran")); err == nil {
		t.Errorf("the batch script ran")
	}
}

// An output dir the user cannot write: on_failure=continue runs the job
// without telemetry and tells the user why, once; on_failure=fail fails the
// job with the reason; nothing is created as root; no node drains.
func TestFaultUnwritableOutputDir(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "unwritable")
	// A dir of root's, mode 0755, in the shared jobs dir.
	locked := host + "-root"
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(host, "job.sh"), "#!/bin/bash\necho \"endpoint=${OTEL_EXPORTER_OTLP_ENDPOINT:-none}\"\n", 0o755)
	jobDir := dir + "-root/run"
	for _, policy := range []string{"continue", "fail"} {
		id := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf("-N2 --gym-otel=job_dir=%s,on_failure=%s -o %s/slurm-%%j.out job.sh", jobDir, policy, dir))
		state, exit := c.waitJob(t, id, 90*time.Second)
		out, _ := os.ReadFile(filepath.Join(host, "slurm-"+id+".out"))
		t.Logf("on_failure=%s: job %s %s %s; output:\n%s", policy, id, state, exit, out)
		switch policy {
		case "continue":
			if state != "COMPLETED" || !strings.Contains(string(out), "endpoint=none") {
				t.Errorf("on_failure=continue: %s %s, want COMPLETED without the env", state, exit)
			}
			if k := strings.Count(string(out), "gym-otel: warning: no collector on "); k != 1 {
				t.Errorf("on_failure=continue: %d warnings in the job's output, want 1", k)
			}
		case "fail":
			if state != "FAILED" || strings.Contains(string(out), "endpoint=") {
				t.Errorf("on_failure=fail: %s %s and the script ran: want FAILED before it", state, exit)
			}
		}
		if !strings.Contains(strings.ToLower(string(out)), "permission denied") || !strings.Contains(string(out), jobDir) {
			t.Errorf("on_failure=%s: the job's output does not give the reason (%s, permission denied)", policy, jobDir)
		}
		c.waitNothingLeft(t, id)
		c.waitIdle(t, 30*time.Second)
	}
	if ents, _ := os.ReadDir(locked); len(ents) > 0 {
		t.Errorf("something was created in the root-owned dir: %v", ents)
	}
}

// waitNodes waits until sinfo shows want (e.g. "c1=idle c2=idle"); a
// drained node fails at once, a down one is waited for (within, at least
// patience).
func (c *cluster) waitNodes(t *testing.T, want string, within time.Duration) {
	t.Helper()
	within = max(within, patience)
	deadline := time.Now().Add(within)
	for {
		st := c.nodeStates(t)
		if st == want {
			return
		}
		if strings.Contains(st, "drain") {
			reason, _ := c.on("ctl", "sinfo", "-R")
			t.Fatalf("a node drained: %s\n%s", st, reason)
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes %s after %v, want %s", st, within, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// A compute node's container is killed mid-job (--no-requeue): the job
// ends as Slurm decides (the node stops answering; SlurmdTimeout=15); the
// surviving node's collector is drained with complete files; when the node
// comes back (docker start: its /run, and so the job's record, survive, and
// its pids start again from 1, so the recorded supervisor pid may now be
// another process), nothing stale runs and the next job works.
func TestFaultNodeKilled(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "node-killed")
	stageConfig(t, host, dir)
	writeFile(t, filepath.Join(host, "job.sh"), vllmOnBothNodes(dir)+"sleep 300\n", 0o755)
	id := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf("-N2 --no-requeue --gym-otel=config=%s/submit.yaml -o %s/slurm-%%j.out job.sh", dir, dir))
	waitFile(t, 60*time.Second, filepath.Join(host, "ready"))
	if out, err := run("docker", "kill", c.project+"-c2"); err != nil {
		t.Fatalf("docker kill c2: %v %s", err, out)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_, _ = run("docker", "start", c.project+"-c2")
		}
	})
	start := time.Now()
	state, exit := c.waitJob(t, id, 180*time.Second)
	t.Logf("job %s: %s %s, %v after c2 was killed; nodes %s", id, state, exit, time.Since(start).Round(time.Second), c.nodeStates(t))
	if state == "COMPLETED" || state == "RUNNING" {
		t.Errorf("job %s: %s after its node died", id, state)
	}
	// c1: drained, complete files, nothing left.
	d := filepath.Join(host, "otel")
	deadline := time.Now().Add(patience)
	for {
		st, _ := os.ReadFile(filepath.Join(d, "state.json"))
		if strings.Contains(string(st), `"drained"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c1's collector not drained: %s", st)
		}
		time.Sleep(250 * time.Millisecond)
	}
	var all []item
	for _, sig := range []string{"metrics", "traces", "logs"} {
		all = append(all, readOTLP(t, filepath.Join(d, sig+".jsonl"))...)
	}
	if len(find(all, metricNamed("vllm_num_requests_running"))) == 0 {
		t.Errorf("c1: no vLLM metrics in the local files")
	}
	for _, p := range c.userProcs("c1") {
		t.Errorf("c1: still running: %s", p)
	}

	// c2 comes back.
	if out, err := run("docker", "start", c.project+"-c2"); err != nil {
		t.Fatalf("docker start c2: %v %s", err, out)
	}
	restarted = true
	c.waitNodes(t, "c1=idle c2=idle", 120*time.Second)
	c.waitNothingLeft(t, "")
	if out, err := c.on("c2", "ls", "-la", "/run/gym-otel/c2/"+id); err == nil {
		t.Logf("c2: the job's record is still there after its return:\n%s", out)
	} else {
		t.Logf("c2: the job's record was removed after its return")
	}
	c2log := c.slurmdLog(t, "c2")
	if i := strings.LastIndex(c2log, "gym-otel: job "+id+": "); i >= 0 {
		t.Logf("c2's last gym-otel line for job %s: %s", id, strings.SplitN(c2log[i:], "\n", 2)[0])
	}

	// The next job works on both nodes, and its prolog on c2 removes the
	// killed job's record if no epilog did (Slurm 24.11 runs none for it).
	smokeFull(t, c)
	if out, err := c.on("c2", "ls", "-la", "/run/gym-otel/c2/"+id); err == nil {
		t.Errorf("c2: job %s's record is still there after the next job:\n%s", id, out)
	}
}
