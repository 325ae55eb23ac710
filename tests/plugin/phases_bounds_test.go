package plugin_test

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
)

// TestPhaseSpansManySteps: a job that runs 300 steps (srun in a loop)
// gets at most supervise.MaxStepSpans slurm.step spans of numbered steps
// on its node; every later step is counted into the one
// slurm.steps.aggregated span (count, failures, worst exit code), so that
// kept and counted make every step the node saw; the batch step keeps its
// span; the traces file stays small.
func TestPhaseSpansManySteps(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "phasesmany")
	const steps = 300
	// Every 50th step fails with exit 4.
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
for i in $(seq 1 %d); do
	if [ $((i %% 50)) -eq 0 ]; then srun -n1 bash -c 'exit 4'; else srun -n1 true; fi
done
echo done
`, steps))
	t0 := time.Now()
	r := asUser(t, 15*time.Minute, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	job := jobIDOf(t, r)
	waitNoCollector(t)
	t.Logf("job %s: %d steps in %v", job, steps, time.Since(t0).Round(time.Second))
	dir := filepath.Join(d, "run", "otel")
	spans := phaseSpans(t, dir)
	var root *phaseSpan
	var numbered, agg []phaseSpan
	batch := 0
	for i, s := range spans {
		switch {
		case s.Name == vocab.SpanJob:
			root = &spans[i]
		case s.Name == vocab.SpanStepsAggregated:
			agg = append(agg, s)
		case s.Name == vocab.SpanStep && s.Attrs[vocab.AttrStepID] == "batch":
			batch++
		case s.Name == vocab.SpanStep:
			if _, err := strconv.Atoi(s.Attrs[vocab.AttrStepID]); err == nil {
				numbered = append(numbered, s)
			}
		}
	}
	if root == nil || batch != 1 {
		t.Fatalf("job span %v, %d batch step spans", root != nil, batch)
	}
	if len(numbered) != supervise.MaxStepSpans {
		t.Errorf("%d numbered step spans, want the cap %d", len(numbered), supervise.MaxStepSpans)
	}
	if len(agg) != 1 {
		t.Fatalf("%d slurm.steps.aggregated spans, want 1", len(agg))
	}
	a := agg[0]
	count, _ := strconv.Atoi(a.Attrs[vocab.AttrStepsCount])
	failed, _ := strconv.Atoi(a.Attrs[vocab.AttrStepsFailed])
	t.Logf("aggregate: %v .. %v count=%s failed=%s worst_exit=%s total_ms=%s kept=%s; the job span's untracked=%q",
		a.Start.Format("15:04:05.000"), a.End.Format("15:04:05.000"), a.Attrs[vocab.AttrStepsCount], a.Attrs[vocab.AttrStepsFailed],
		a.Attrs[vocab.AttrStepsWorstExitCode], a.Attrs[vocab.AttrStepsTotalMs], a.Attrs[vocab.AttrStepsKept], root.Attrs[vocab.AttrStepsUntracked])
	if len(numbered)+count != steps {
		// A step whose end the supervisor did not answer within 250 ms
		// loses its span; say how many.
		t.Errorf("kept %d + aggregated %d = %d steps, the job ran %d", len(numbered), count, len(numbered)+count, steps)
	}
	// The failing steps: 6 of 300, each 50th; the first 100 steps kept
	// hold 2 of them, the aggregate the other 4.
	keptFailed := 0
	for _, s := range numbered {
		if s.Attrs[vocab.AttrStepExitCode] == "4" {
			keptFailed++
		}
	}
	if keptFailed+failed != steps/50 || a.Attrs[vocab.AttrStepsWorstExitCode] != "4" {
		t.Errorf("failed steps: %d kept + %d aggregated, worst exit %s; want %d in all, worst 4", keptFailed, failed,
			a.Attrs[vocab.AttrStepsWorstExitCode], steps/50)
	}
	if a.Parent != root.ID || a.Start.Before(root.Start) || a.End.After(root.End) || !a.Start.Before(a.End) {
		t.Errorf("the aggregate (%v .. %v, parent %s) is not inside the job's span (%v .. %v, %s)", a.Start, a.End, a.Parent, root.Start, root.End, root.ID)
	}
	// The aggregate follows the kept steps: it starts after the last kept
	// step started.
	var lastKept time.Time
	for _, s := range numbered {
		if s.Start.After(lastKept) {
			lastKept = s.Start
		}
	}
	if a.Start.Before(lastKept) {
		t.Errorf("the aggregate starts %v, before the last kept step %v", a.Start, lastKept)
	}
	if len(spans) > supervise.MaxStepSpans+12 {
		t.Errorf("%d phase spans for %d steps: not bounded", len(spans), steps)
	}
	st, err := os.Stat(filepath.Join(dir, "traces.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d phase spans, traces.jsonl %d bytes", len(spans), st.Size())
	waitIdle(t)
}

// logTime is the time of the first line of a Slurm log (LogTimeFormat=
// iso8601_ms, local time) that matches re, and the line; zero when none.
func logTime(t *testing.T, path string, re *regexp.Regexp) (time.Time, string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	stamp := regexp.MustCompile(`^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\]`)
	for _, l := range strings.Split(string(data), "\n") {
		if !re.MatchString(l) {
			continue
		}
		m := stamp.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02T15:04:05.000", m[1], time.Local)
		if err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		return at, l
	}
	return time.Time{}, ""
}

// phaseSlack is how far a phase span's time may lie from the line Slurm
// logs for the same moment: slurmd logs a step's launch request before it
// forks slurmstepd, which loads its plugins before the plugin takes the
// step's start, and slurmstepd logs the task's exit before the plugin's
// slurm_spank_exit. Measured on a loaded two-core host: 12 to 204 ms.
const phaseSlack = time.Second

// checkTwoNodePhases checks the phase spans of the two-node job of
// TestCgroupMetrics against Slurm's own times: on each node one job span,
// its prolog, steps, batch script and final wait inside it, every span
// with host.name the node; one trace for both
// nodes; the hungry step 0 on gn2 only and step 1 on gn1 only, each
// starting within phaseSlack after slurmd's "launch task StepId=<job>.<n>"
// and ending within phaseSlack after slurmstepd's "task 0 ... exited"
// line on its node (either side: the order of Slurm's log line and the
// plugin's callback is Slurm's); the prolog on each node starting within
// phaseSlack of slurmctld's allocation; the batch step ending within
// phaseSlack of slurmctld's "_job_complete" and in the second of
// scontrol's EndTime.
func checkTwoNodePhases(t *testing.T, job string, dirs map[string]string) {
	t.Helper()
	ctld := filepath.Join(stateDir, "slurmctld.log")
	alloc, aline := logTime(t, ctld, regexp.MustCompile(`JobId=`+job+`\b.*(NodeList=| on gn)`))
	done, dline := logTime(t, ctld, regexp.MustCompile(`_job_complete: JobId=`+job+`\b`))
	t.Logf("slurmctld: %s | %s", aline, dline)
	_, end := scontrolTimes(t, job)
	trace := ""
	for node, dir := range dirs {
		spans := phaseSpans(t, dir)
		var root *phaseSpan
		steps := map[string]phaseSpan{}
		for i, s := range spans {
			if s.Resource["host.name"] != node || s.Resource["slurm_job_id"] != job {
				t.Errorf("%s: %s with host.name %q slurm_job_id %q", node, s.Name, s.Resource["host.name"], s.Resource["slurm_job_id"])
			}
			switch s.Name {
			case vocab.SpanJob:
				if root != nil {
					t.Fatalf("%s: two job spans", node)
				}
				root = &spans[i]
			case vocab.SpanStep:
				steps[s.Attrs[vocab.AttrStepID]] = s
			}
		}
		if root == nil {
			t.Fatalf("%s: no job span in %s", node, dir)
		}
		if trace == "" {
			trace = root.Trace
		}
		for _, s := range spans {
			if s.Trace != trace {
				t.Errorf("%s: %s in trace %s, the job's is %s", node, s.Name, s.Trace, trace)
			}
			within := map[string]bool{vocab.SpanProlog: true, vocab.SpanStep: true, vocab.SpanBatchScript: true, vocab.SpanFinalWait: true}
			if within[s.Name] && (s.Start.Before(root.Start) || s.End.After(root.End) || s.End.Before(s.Start)) {
				t.Errorf("%s: %s %s (%v .. %v) not inside the node's job span (%v .. %v)", node, s.Name, s.Attrs[vocab.AttrStepID],
					s.Start.Format("15:04:05.000"), s.End.Format("15:04:05.000"), root.Start.Format("15:04:05.000"), root.End.Format("15:04:05.000"))
			}
			if s.Name == vocab.SpanStep && s.Parent != root.ID {
				t.Errorf("%s: step %s's parent %s is not the node's job span %s", node, s.Attrs[vocab.AttrStepID], s.Parent, root.ID)
			}
		}
		if _, ok := steps["extern"]; !ok {
			t.Errorf("%s: no extern step span (PrologFlags=Contain)", node)
		}
		mine, other := "1", "0"
		if node == "gn2" {
			mine, other = "0", "1"
		}
		if _, ok := steps[other]; ok {
			t.Errorf("%s: a span of step %s, which ran on the other node", node, other)
		}
		s, ok := steps[mine]
		if !ok {
			t.Errorf("%s: no span of its step %s", node, mine)
			continue
		}
		log := filepath.Join(stateDir, "slurmd-"+node+".log")
		launch, lline := logTime(t, log, regexp.MustCompile(`launch task StepId=`+job+`\.`+mine+`\b`))
		exited, eline := logTime(t, log, regexp.MustCompile(`\[`+job+`\.`+mine+`\] task 0 \(\d+\) exited`))
		t.Logf("%s step %s: span %s .. %s exit=%s; slurmd: %q | %q", node, mine, s.Start.Format("15:04:05.000"), s.End.Format("15:04:05.000"),
			s.Attrs[vocab.AttrStepExitCode], lline, eline)
		if launch.IsZero() || exited.IsZero() {
			t.Errorf("%s: slurmd's log has no launch or task exit line of step %s.%s", node, job, mine)
			continue
		}
		if d := s.Start.Sub(launch); d.Abs() > phaseSlack {
			t.Errorf("%s: step %s starts %v after slurmd's launch request, want within %v", node, mine, d, phaseSlack)
		}
		if d := s.End.Sub(exited); d.Abs() > phaseSlack {
			t.Errorf("%s: step %s ends %v after its task's exit in slurmstepd's log, want within %v", node, mine, d, phaseSlack)
		}
		t.Logf("%s step %s: start %v after slurmd's launch line, end %v after the task's exit line", node, mine,
			s.Start.Sub(launch).Round(time.Millisecond), s.End.Sub(exited).Round(time.Millisecond))
		for _, p := range spans {
			if p.Name != vocab.SpanProlog {
				continue
			}
			if alloc.IsZero() {
				t.Errorf("no allocation line of job %s in slurmctld's log", job)
			} else if d := p.Start.Sub(alloc); d < -phaseSlack || d > phaseSlack {
				t.Errorf("%s: the prolog starts %v from slurmctld's allocation", node, d)
			} else {
				t.Logf("%s: prolog start %v after slurmctld's allocation line", node, d.Round(time.Millisecond))
			}
		}
		if node != "gn1" {
			continue
		}
		b, ok := steps["batch"]
		if !ok {
			t.Errorf("gn1: no batch step span")
			continue
		}
		if d := done.Sub(b.End); done.IsZero() || d.Abs() > phaseSlack {
			t.Errorf("gn1: the batch step ends %v before slurmctld's _job_complete (%v), want within %v", d, done, phaseSlack)
		}
		if d := b.End.Sub(end); d < -time.Second || d > 2*time.Second {
			t.Errorf("gn1: the batch step ends %v, scontrol's EndTime %v", b.End, end)
		}
		t.Logf("gn1: batch step end %v before slurmctld's _job_complete line; EndTime %v", done.Sub(b.End).Round(time.Millisecond), end.Format("15:04:05"))
	}
}

// holdPoke is run by python3 as a local user against a control socket (a
// path, or an abstract name without its leading NUL as an older record
// held): each named attempt connects, sends its bytes, and reads the
// answer (at most 4 KiB, 3 s); it prints one JSON object of attempt ->
// answer (or "<error>"). Attempts: "forged_end" (a well-formed step end of step
// 4242+uid%100), "forged_start", "sampled", "oversize" (1 MiB without a
// newline), "long_line" (a 64 KiB step line with a newline), "binary"
// (4 KiB of random bytes and a newline), "nul", "negative", "flood"
// (200 connections sending garbage, answers joined).
const holdPoke = `
import json, os, socket, sys, time
name = sys.argv[1]
addr = name if name.startswith("/") else "\0" + name
def say(data, wait=3.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(wait)
    try:
        s.connect(addr)
    except OSError as e:
        return "<connect: %s>" % e
    try:
        s.sendall(data)
    except OSError as e:
        pass
    out = b""
    try:
        while len(out) < 4096:
            b = s.recv(4096)
            if not b:
                break
            out += b
    except socket.timeout:
        out += b"<timeout>"
    except OSError as e:
        out += ("<%s>" % e).encode()
    s.close()
    return out.decode("latin-1")
now = int(time.time() * 1000)
sid = 4242 + os.getuid() % 100
r = {}
r["forged_end"] = say(b"step end %d %d %d 0 0 0 0 1\n" % (sid, now - 1000, now))
r["forged_start"] = say(b"step start %d %d\n" % (sid + 1, now))
r["sampled"] = say(b"sampled\n")
r["oversize"] = say(b"step end " + b"9" * (1 << 20))
r["long_line"] = say(b"step end 4343 " + b"1 " * 32768 + b"\n")
r["binary"] = say(os.urandom(4096) + b"\n")
r["nul"] = say(b"step\0end 4344 1 2 0 0 0 0 1\n")
r["negative"] = say(b"step end -1 -5 -6 0 0 0 0 1\n")
r["flood"] = "".join(say(b"step end 4345 %d %d 0 0 0 0 1\n" % (now, now), 1.0) for _ in range(200))[:200]
print(json.dumps(r))
`

// TestControlSocketForgedLines: the control socket takes a step's phase lines
// from root (slurmstepd) only. While a job runs, another local user (who
// may find the socket's path in /proc/net/unix) and a process of the
// job's own user each try to send well-formed step lines of steps that
// never ran, a "sampled" question, a 1 MiB line, a 64 KiB line, random
// bytes, a NUL, negative numbers and 200 connections in a row: neither
// can connect (EACCES: the socket's dir is root's, 0700), so none is
// answered; the supervisor lives on, the job's real step after the attack
// has its span, and no forged step has one.
func TestControlSocketForgedLines(t *testing.T) {
	waitIdle(t)
	other := otherUser(t)
	d := markerDir(t, "holdforge")
	gate := filepath.Join(d, "attacked")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(
		"for i in $(seq 1 600); do [ -e %s ] && break; sleep 0.2; done\nsrun -n1 true\necho done\n", gate))
	poke := writeScript(t, filepath.Base(d)+".py", holdPoke)
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	job := jobIDOf(t, r)
	waitJobState(t, job, patience, "RUNNING")
	name, supPID := controlSocketOf(t, "gn1", job)
	pid := strconv.Itoa(supPID)
	// Another user may see the path: /proc/net/unix lists sockets to all.
	if o := asOther(t, other, 30*time.Second, nil, "grep -c "+name+" /proc/net/unix"); strings.TrimSpace(o.stdout) != "1" {
		t.Logf("the other user does not see the socket's path in /proc/net/unix: %q", o.stdout)
	}
	answers := map[string]map[string]string{}
	for who, res := range map[string]result{
		other:                      asOther(t, other, 2*time.Minute, nil, "python3 "+poke+" "+name),
		slurmEnv["GOS_SLURM_USER"]: asUser(t, 2*time.Minute, nil, "python3 "+poke+" "+name),
	} {
		m := map[string]string{}
		if err := json.Unmarshal([]byte(strings.TrimSpace(res.stdout)), &m); err != nil || res.code != 0 {
			t.Fatalf("%s: the probe: exit %d %v: %s %s", who, res.code, err, res.stdout, res.stderr)
		}
		answers[who] = m
		t.Logf("%s: %v", who, m)
	}
	for who, m := range answers {
		for k, v := range m {
			if strings.Contains(v, "ok\n") {
				t.Errorf("%s's %s was answered %q", who, k, v)
			}
			if !strings.Contains(v, "<connect: [Errno 13] Permission denied>") {
				t.Errorf("%s's %s reached the socket: %q; want the connect refused with EACCES", who, k, v)
			}
		}
	}
	if _, err := os.Stat("/proc/" + pid); err != nil {
		t.Fatalf("the supervisor %s is gone after the attack", pid)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJobsGone(t, patience, []string{job})
	waitNoCollector(t)
	dir := filepath.Join(d, "run", "otel")
	spans := phaseSpans(t, dir)
	seen := map[string]bool{}
	for _, s := range spans {
		if s.Name == vocab.SpanStep {
			seen[s.Attrs[vocab.AttrStepID]] = true
		}
		if s.Name == vocab.SpanJob && s.Attrs[vocab.AttrStepsUntracked] != "" {
			t.Errorf("the job's span counts %s untracked steps", s.Attrs[vocab.AttrStepsUntracked])
		}
	}
	t.Logf("step spans: %v", seen)
	if !seen["0"] || !seen["batch"] {
		t.Errorf("the job's real steps after the attack have no span: %v", seen)
	}
	for id := range seen {
		if id != "0" && id != "batch" && id != "extern" {
			t.Errorf("a span of step %s, which never ran", id)
		}
	}
	if log, err := os.ReadFile(filepath.Join(dir, "supervisor.log")); err != nil || strings.Contains(string(log), "panic") {
		t.Errorf("supervisor.log: %v, panic: %v", err, strings.Contains(string(log), "panic"))
	}
	waitIdle(t)
}

// TestPluginReceiverAnotherUser: the job's cgroup figures reach its
// collector only from the supervisor, pushed to the plugin's own receiver
// (otlp/plugin, a 127.0.0.1 port behind the plugin's token). While the
// job's step runs, another local user who reads that port from the job's
// collector.yaml and posts a forged cgroup point to it, with no token and
// with a made-up one, gets no 200 (the packet filter resets the
// connection; without it, 401); after the job the files hold the job's
// memory as the supervisor read it and no forged series. The same numbers
// stay readable to the other user in Slurm's job cgroup (cgroupfs files
// are world-readable): they are no secret, only not anyone's to write.
func TestPluginReceiverAnotherUser(t *testing.T) {
	if err := upCluster("--cgroup", "--prolog-flags", "Alloc,Contain"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := upCluster(); err != nil {
			t.Error(err)
		}
	})
	waitIdle(t)
	other := otherUser(t)
	d := markerDir(t, "plugport")
	gate := filepath.Join(d, "probed")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(
		"srun -n1 bash -c 'for i in $(seq 1 600); do [ -e %s ] && break; sleep 0.2; done'\necho done\n", gate))
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch -w gn1 --mem=200M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	job := jobIDOf(t, r)
	waitJobState(t, job, patience, "RUNNING")
	yaml := filepath.Join(d, "run", "otel", "collector.yaml")
	waitFile(t, patience, yaml)
	var port string
	for deadline := time.Now().Add(patience); port == ""; time.Sleep(200 * time.Millisecond) {
		cy, _ := os.ReadFile(yaml)
		if m := regexp.MustCompile(`(?s)otlp/plugin:.*?endpoint: "?127\.0\.0\.1:(\d+)`).FindSubmatch(cy); m != nil {
			port = string(m[1])
		}
		if time.Now().After(deadline) {
			t.Fatalf("no otlp/plugin receiver in %s", yaml)
		}
	}
	metrics := filepath.Join(d, "run", "otel", "metrics.jsonl")
	harness.WaitFor(t, patience, "the supervisor's first cgroup reading in metrics.jsonl", func() bool {
		if _, err := os.Stat(metrics); err != nil {
			return false
		}
		return len(of(cgroupPoints(t, metrics, vocab.CgroupMemoryCurrent), map[string]string{"cgroup": "job"})) > 0
	})
	url := "http://127.0.0.1:" + port + "/v1/metrics"
	forged := fmt.Sprintf(`{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"%s"}}]},`+
		`"scopeMetrics":[{"metrics":[{"name":"cgroup_forged_probe_bytes","gauge":{"dataPoints":[{"timeUnixNano":"%d","asDouble":1,`+
		`"attributes":[{"key":"cgroup","value":{"stringValue":"job"}}]}]}}]}]}]}`, vocab.CgroupProducer, time.Now().UnixNano())
	for _, auth := range []string{"", "-H 'Authorization: Bearer gos_0123456789abcdef'"} {
		o := asOther(t, other, 30*time.Second, nil, fmt.Sprintf("curl -sS -m 10 -o /dev/null -w '%%{http_code}' -H 'Content-Type: application/json' %s --data '%s' %s; echo \" exit=$?\"", auth, forged, url))
		t.Logf("another user posts to %s (%q): %q", url, auth, o.stdout)
		// The HTTP status is the three digits before " exit=" (a port
		// number in curl's messages may hold "200" too).
		if regexp.MustCompile(`(^|\n)200 exit=`).MatchString(o.stdout) {
			t.Errorf("another user's forged point was taken by the job's plugin receiver: %q", o.stdout)
		}
	}
	// The decision's ground: Slurm's job group is world-readable anyway.
	files, _ := filepath.Glob("/sys/fs/cgroup/memory/slurm*/uid_*/job_" + job + "/memory.usage_in_bytes")
	v2, _ := filepath.Glob("/sys/fs/cgroup/system.slice/*slurmstepd.scope/job_" + job + "/memory.current")
	files = append(files, v2...)
	if len(files) == 0 {
		t.Errorf("no memory group of job %s under /sys/fs/cgroup", job)
	}
	for _, f := range files {
		c := asOther(t, other, 30*time.Second, nil, "cat "+f)
		t.Logf("another user reads %s: exit %d %q", f, c.code, strings.TrimSpace(c.stdout))
		if _, err := strconv.ParseInt(strings.TrimSpace(c.stdout), 10, 64); c.code != 0 || err != nil {
			t.Errorf("another user cannot read %s (exit %d): the figures would be news to them; revisit the doc", f, c.code)
		}
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJobsGone(t, patience, []string{job})
	waitNoCollector(t)
	if ps := of(cgroupPoints(t, metrics, vocab.CgroupMemoryCurrent), map[string]string{"cgroup": "job"}); len(ps) == 0 {
		t.Errorf("the supervisor's readings left no job memory in metrics.jsonl")
	}
	if b, _ := os.ReadFile(metrics); strings.Contains(string(b), "cgroup_forged_probe_bytes") {
		t.Errorf("the forged series is in metrics.jsonl")
	}
	log, _ := os.ReadFile(filepath.Join(d, "run", "otel", "supervisor.log"))
	if strings.Contains(string(log), "panic") {
		t.Error("the supervisor panicked")
	}
	waitIdle(t)
}
