package plugin_test

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// phaseSpan is one span of the job's traces.jsonl, with its resource.
type phaseSpan = slurmkit.PhaseSpan

// phaseSpans reads the slurm.* spans of traces.jsonl in dir.
func phaseSpans(t *testing.T, dir string) []phaseSpan { t.Helper(); return slurmkit.PhaseSpans(t, dir) }

// scontrolTimes are the job's StartTime and EndTime (whole seconds, local
// time) as slurmctld keeps them.
func scontrolTimes(t *testing.T, job string) (start, end time.Time) {
	t.Helper()
	out, err := run("scontrol", "-o", "show", "job", job)
	if err != nil {
		t.Fatalf("scontrol show job %s: %v %s", job, err, out)
	}
	get := func(k string) time.Time {
		m := regexp.MustCompile(k + `=(\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %s in %s", k, out)
		}
		v, err := time.ParseInLocation("2006-01-02T15:04:05", m[1], time.Local)
		if err != nil {
			t.Fatalf("%s=%s: %v", k, m[1], err)
		}
		return v
	}
	return get("StartTime"), get("EndTime")
}

// TestPhaseSpans: a job with two steps, one failing, has its Slurm phases
// as spans in its traces.jsonl: one trace, the node's slurm.job root with
// slurm.prolog and a slurm.step per step under it (exit codes 0 and 3),
// the batch script and the final wait under the batch step, every span
// with the job's identity (slurm_job_id, Lens' nv.dl.job.uuid; slurmkit.CheckNodePhases, which the docker suites share); the batch
// step's times agree with slurmctld's StartTime and EndTime, the steps
// lie inside the batch script.
func TestPhaseSpans(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "phases")
	script := writeScript(t, filepath.Base(d)+".sh", "srun -n1 true\nsrun -n1 bash -c 'sleep 1; exit 3'\necho done\n")
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	job := jobIDOf(t, r)
	waitNoCollector(t)
	start, end := scontrolTimes(t, job)
	spans := phaseSpans(t, filepath.Join(d, "run", "otel"))
	want := render.LensUUID("nemo.lens.job/" + clusterName() + "/" + job)
	ns := slurmkit.CheckNodePhases(t, spans, slurmkit.NodePhases{Node: "gn1",
		Identity: map[string]string{"slurm_job_id": job, render.LensJobUUID: want},
		Steps:    map[string]int{"0": 0, "1": 3}, Batch: true})
	byName, root := ns.ByName, ns.Job
	b, s1 := ns.Steps["batch"], ns.Steps["1"]
	bs, fw := byName[vocab.SpanBatchScript][0], byName[vocab.SpanFinalWait][0]
	if d := s1.End.Sub(s1.Start); d < time.Second || d > 10*time.Second {
		t.Errorf("step 1 (sleep 1) took %v", d)
	}
	// slurmctld's times are whole seconds. With PrologFlags=Alloc the
	// prolog starts at the allocation (StartTime, or up to 2 s later) and
	// the batch step after the prolog; the batch step ends in the second
	// of EndTime (give or take one).
	pr := byName[vocab.SpanProlog][0]
	if pst := pr.Start.Truncate(time.Second); pst.Before(start) || pst.After(start.Add(2*time.Second)) || pr.Attrs[vocab.AttrStartKnown] != "true" {
		t.Errorf("prolog start %v (known %s), slurmctld's StartTime %v", pr.Start, pr.Attrs[vocab.AttrStartKnown], start)
	}
	// The prolog's start is the C prolog's stamp, handed on to the
	// supervisor through the environment (the core reads it with C's
	// getenv: a c-shared library's os.Getenv does not see the C side's
	// setenv): not marked as missing, and before the supervisor's own
	// start, which the span carries.
	supStart, _ := strconv.ParseInt(pr.Attrs[supervise.PrologSupervisorStart], 10, 64)
	if strings.Contains(pr.Status, "not handed on") || supStart == 0 || !pr.Start.Before(time.Unix(0, supStart)) || time.Unix(0, supStart).After(pr.End) {
		t.Errorf("prolog %v .. %v (%q), the supervisor's start %v: want the prolog's start handed on, before the supervisor's start",
			pr.Start, pr.End, pr.Status, time.Unix(0, supStart))
	}
	t.Logf("prolog: %v before the supervisor's start, %v from it to the collector's ready",
		time.Unix(0, supStart).Sub(pr.Start).Round(time.Microsecond), pr.End.Sub(time.Unix(0, supStart)).Round(time.Microsecond))
	if b.Start.Before(pr.End) {
		t.Errorf("batch step start %v before the prolog's end %v", b.Start, pr.End)
	}
	if d := b.End.Sub(end); d < -time.Second || d > 2*time.Second {
		t.Errorf("batch step end %v, slurmctld's EndTime %v (off by %v)", b.End, end, d)
	}
	if q := byName[vocab.SpanQueueWait]; len(q) != 1 || !q[0].End.Equal(start) || q[0].Start.After(start) || q[0].Parent != root.ID || !root.Start.Equal(q[0].Start) {
		t.Errorf("queue wait %v (want one, ending at StartTime %v, under the job's span, which starts with it)", q, start)
	}
	checkPhaseSpanMetrics(t, filepath.Join(d, "run", "otel"), spans)
	checkAfterSpans(t, job, filepath.Join(d, "run"), spans, root, b)
	t.Logf("job %s: %d phase spans; StartTime %v EndTime %v; prolog %v, batch script %v, final wait %v",
		job, len(spans), start.Format("15:04:05"), end.Format("15:04:05"), pr.End.Sub(pr.Start).Round(time.Millisecond),
		bs.End.Sub(bs.Start).Round(time.Millisecond), fw.End.Sub(fw.Start).Round(time.Millisecond))
	waitIdle(t)
}

// checkPhaseSpanMetrics: every Slurm phase span name has, in metrics.jsonl
// of dir, as many span metrics calls (and duration counts) as it has spans
// in traces.jsonl: the connector's for the spans it exported, the
// supervisor's own (appended after the collector's exit, continuing the
// connector's series) for the spans it appended then and those the
// connector had not exported when the drain stopped it.
func checkPhaseSpanMetrics(t *testing.T, dir string, spans []phaseSpan) {
	t.Helper()
	m, err := otlptest.Read(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	calls, counts := m.SpanMetrics()
	n := map[string]int{}
	for _, sp := range spans {
		n[sp.Name]++
	}
	var got []string
	for name, c := range n {
		got = append(got, fmt.Sprintf("%s %d/%v/%v", name, c, calls[name], counts[name]))
		if calls[name] != float64(c) || counts[name] != float64(c) {
			t.Errorf("%s: %d spans in traces.jsonl, span metrics calls %v and duration count %v in metrics.jsonl", name, c, calls[name], counts[name])
		}
	}
	sort.Strings(got)
	t.Logf("phase spans / calls / duration counts: %s", strings.Join(got, ", "))
}

// TestPhaseSpansCancelled: a job cancelled during a step still has its
// phases ended: the job's span, the killed step's and the batch step's,
// each marked with the signal or with its end not seen, none left open.
func TestPhaseSpansCancelled(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "phasescancel")
	script := writeScript(t, filepath.Base(d)+".sh", "srun -n1 sleep 300\n")
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	job := jobIDOf(t, r)
	waitJobState(t, job, patience, "RUNNING")
	for deadline := time.Now().Add(patience); len(userProcs("sleep 300")) == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the step never started")
		}
	}
	time.Sleep(time.Second)
	if out, err := run("scancel", job); err != nil {
		t.Fatalf("scancel: %v %s", err, out)
	}
	waitJobsGone(t, patience, []string{job})
	waitNoCollector(t)
	spans := phaseSpans(t, filepath.Join(d, "run", "otel"))
	var root, step0, batch *phaseSpan
	for i, s := range spans {
		t.Logf("%-20s step=%-6s %s .. %s exit=%s signal=%s end_known=%s %s", s.Name, s.Attrs[vocab.AttrStepID],
			s.Start.Format("15:04:05.000"), s.End.Format("15:04:05.000"), s.Attrs[vocab.AttrStepExitCode],
			s.Attrs[vocab.AttrStepSignal], s.Attrs[vocab.AttrEndKnown], s.Status)
		switch {
		case s.Name == vocab.SpanJob:
			root = &spans[i]
		case s.Name == vocab.SpanStep && s.Attrs[vocab.AttrStepID] == "0":
			step0 = &spans[i]
		case s.Name == vocab.SpanStep && s.Attrs[vocab.AttrStepID] == "batch":
			batch = &spans[i]
		}
	}
	if root == nil || step0 == nil || batch == nil {
		t.Fatalf("a cancelled job's spans: job %v, step 0 %v, batch %v", root != nil, step0 != nil, batch != nil)
	}
	// A step's tasks end by scancel's SIGTERM: the span says the signal,
	// or the exit code 143 (128 + 15) of a shell whose child the signal
	// killed first (the batch script's bash, by the order the signals
	// land), or that its end is not known.
	for _, s := range []*phaseSpan{step0, batch} {
		if !s.Error || (s.Attrs[vocab.AttrStepSignal] == "" && s.Attrs[vocab.AttrStepExitCode] != "143" && s.Attrs[vocab.AttrEndKnown] != "false") {
			t.Errorf("step %s of a cancelled job: neither a signal, nor exit 143, nor its end marked unknown (%v)", s.Attrs[vocab.AttrStepID], s.Attrs)
		}
		if s.End.Before(s.Start) || s.End.After(root.End) {
			t.Errorf("step %s: %v .. %v, the job's span ends %v", s.Attrs[vocab.AttrStepID], s.Start, s.End, root.End)
		}
	}
	// No final wait for a script the signal killed; a script that exited
	// (143) has its hold, cut short by the cancel within the job's span.
	for _, s := range spans {
		if s.Name != vocab.SpanFinalWait {
			continue
		}
		if batch.Attrs[vocab.AttrStepSignal] != "" {
			t.Errorf("a final wait for a killed script: %v", s)
		} else if s.End.After(root.End) || s.End.Sub(s.Start) > 10*time.Second {
			t.Errorf("the final wait of a cancelled job %v .. %v, the job's span ends %v", s.Start, s.End, root.End)
		}
	}
	if got := step0.End.Sub(step0.Start); got <= 0 || got > 60*time.Second {
		t.Errorf("step 0 (sleep 300, cancelled) lasted %v", got)
	}
	checkPhaseSpanMetrics(t, filepath.Join(d, "run", "otel"), spans)
	checkAfterSpans(t, job, filepath.Join(d, "run"), spans, *root, *batch)
	waitIdle(t)
}

// checkAfterSpans: the drain and the epilog, which end after the collector
// that would export them, are in the node's traces.jsonl (written by the
// supervisor after the collector's exit): one slurm.drain and one
// slurm.epilog under the job's span, the drain begun by the epilog and
// ended (its end known: the collector's exit), the epilog's start known
// (after the batch step, before the drain) and its end marked unknown;
// their resource is the one the collector stamped on the other phase
// spans (the run's identity and Lens' keys), byte for byte. The receipt
// lists the line as delivered: the supervisor sent it to the backend
// itself, which holds exactly these two; `replay` sends nothing (the
// receipt says the backend has everything), `replay --appended` sends
// nothing (said), and with --force sends them again.
func checkAfterSpans(t *testing.T, job, jobDir string, spans []phaseSpan, root, batch phaseSpan) {
	t.Helper()
	var drain, epilog []phaseSpan
	for _, s := range spans {
		switch s.Name {
		case vocab.SpanDrain:
			drain = append(drain, s)
		case vocab.SpanEpilog:
			epilog = append(epilog, s)
		}
	}
	if len(drain) != 1 || len(epilog) != 1 {
		t.Fatalf("%d slurm.drain and %d slurm.epilog spans in traces.jsonl, want one each", len(drain), len(epilog))
	}
	dr, ep := drain[0], epilog[0]
	t.Logf("epilog %s .. %s (%v) end_known=%s; drain %s .. %s (%v) cause %q end_known=%s killed=%s; job span ends %s",
		ep.Start.Format("15:04:05.000"), ep.End.Format("15:04:05.000"), ep.End.Sub(ep.Start).Round(time.Millisecond), ep.Attrs[vocab.AttrEndKnown],
		dr.Start.Format("15:04:05.000"), dr.End.Format("15:04:05.000"), dr.End.Sub(dr.Start).Round(time.Millisecond),
		dr.Attrs[vocab.AttrDrainCause], dr.Attrs[vocab.AttrEndKnown], dr.Attrs[vocab.AttrDrainCollectorKilled], root.End.Format("15:04:05.000"))
	for _, s := range []phaseSpan{dr, ep} {
		if s.Trace != root.Trace || s.Parent != root.ID {
			t.Errorf("%s: trace %s parent %s, want the job's span (%s %s)", s.Name, s.Trace, s.Parent, root.Trace, root.ID)
		}
		if fmt.Sprint(s.Resource) != fmt.Sprint(root.Resource) {
			t.Errorf("%s: resource\n%v\nthe collector stamped on the job's span\n%v", s.Name, s.Resource, root.Resource)
		}
	}
	if dr.Attrs[vocab.AttrEndKnown] != "true" || !strings.HasPrefix(dr.Attrs[vocab.AttrDrainCause], "epilog") ||
		dr.Start.After(root.End) || dr.End.Before(root.End) {
		t.Errorf("drain %v .. %v %v: want begun by the epilog, its end known, around the job span's end %v", dr.Start, dr.End, dr.Attrs, root.End)
	}
	if ep.Attrs[vocab.AttrEndKnown] != "false" || ep.Attrs[vocab.AttrStartKnown] != "true" || ep.Start.Before(batch.End) ||
		ep.Start.After(dr.Start) || ep.End.Before(dr.End) {
		t.Errorf("epilog %v .. %v %v: want its start after the batch step's end %v and before the drain %v, its end unknown", ep.Start, ep.End, ep.Attrs, batch.End, dr.Start)
	}
	otel := filepath.Join(jobDir, "otel")
	rb, err := os.ReadFile(filepath.Join(otel, "receipt.json"))
	var rec struct {
		Appended []struct {
			File      string `json:"file"`
			Offset    int64  `json:"offset"`
			Length    int64  `json:"length"`
			Spans     int    `json:"spans"`
			Points    int    `json:"points"`
			Delivered bool   `json:"delivered"`
			Cause     string `json:"cause"`
		} `json:"appended"`
	}
	// The drain's and the epilog's spans, and the span metrics the
	// connector did not export (calls and duration of each series: theirs
	// and those of the spans sent at the drain, the job's span among them).
	if err != nil || json.Unmarshal(rb, &rec) != nil || len(rec.Appended) != 2 || rec.Appended[0].File != "traces.jsonl" || rec.Appended[0].Spans != 2 ||
		rec.Appended[1].File != "metrics.jsonl" || rec.Appended[1].Points < 4 || rec.Appended[1].Points%2 != 0 {
		t.Fatalf("receipt.json: %v %s", err, rb)
	}
	mb, _ := os.ReadFile(filepath.Join(otel, "metrics.jsonl"))
	if a := rec.Appended[1]; a.Offset+a.Length > int64(len(mb)) || !strings.Contains(string(mb[a.Offset:a.Offset+a.Length]), `"slurm.drain"`) ||
		!strings.Contains(string(mb[a.Offset:a.Offset+a.Length]), `"slurm.epilog"`) {
		t.Errorf("the receipt's metrics line (offset %d, %d bytes) is not the span metrics of the drain and the epilog in metrics.jsonl (%d bytes)", a.Offset, a.Length, len(mb))
	}
	tb, _ := os.ReadFile(filepath.Join(otel, "traces.jsonl"))
	if a := rec.Appended[0]; a.Offset+a.Length > int64(len(tb)) || !strings.Contains(string(tb[a.Offset:a.Offset+a.Length]), `"slurm.drain"`) {
		t.Errorf("the receipt's line (offset %d, %d bytes) is not the drain's in traces.jsonl (%d bytes)", a.Offset, a.Length, len(tb))
	}
	inBackend := func() (n int) {
		for _, s := range phaseSpans(t, backendDir) {
			if s.Resource["slurm_job_id"] == job && (s.Name == vocab.SpanDrain || s.Name == vocab.SpanEpilog) {
				n++
			}
		}
		return n
	}
	for _, a := range rec.Appended {
		if !a.Delivered || a.Cause != "" {
			t.Errorf("the receipt's %s line: delivered %v (cause %q), want delivered by the supervisor", a.File, a.Delivered, a.Cause)
		}
	}
	// With the default delivery from the files the appended lines go with
	// the files' last pass, not in requests of their own (as with
	// delivery: collector, whose cost is the bench's P3D).
	sl, _ := os.ReadFile(filepath.Join(otel, "supervisor.log"))
	if m := deliveredRE.FindSubmatch(sl); m != nil {
		t.Errorf("supervisor.log shows the appended lines sent apart (in %s ms) under the default delivery from the files:\n%s", m[1], sl)
	}
	if !strings.Contains(string(sl), "delivery: the backend answered for every line of the files") {
		t.Errorf("supervisor.log does not say the files' last delivery pass took every line:\n%s", sl)
	}
	waitBackend := func(want int) int {
		deadline := time.Now().Add(30 * time.Second)
		for inBackend() < want && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		return inBackend()
	}
	if n := waitBackend(2); n != 2 {
		t.Errorf("the backend holds %d drain and epilog spans of job %s, want 2 (delivered by the supervisor)", n, job)
	}
	replayAppended := func(force string) result {
		r := asUser(t, 90*time.Second, tokenEnv(), fmt.Sprintf("%s/gym-otel-spank replay --appended %s --binary %s --timeout 60s --endpoint http://127.0.0.1:%s --token-env OTEL_TOKEN %s",
			plugDir, force, testenv.Collector(t), backendPort, jobDir))
		t.Logf("replay --appended %s: exit %d\n%s%s", force, r.code, r.stdout, r.stderr)
		return r
	}
	if r := replayAppended(""); r.code != 0 || !strings.Contains(r.stdout, "2 appended lines skipped") || !strings.Contains(r.stdout, "nothing left to send") {
		t.Errorf("replay --appended of delivered lines: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The delivery checkpoint (the default delivery from the files) says
	// the backend acknowledged every line, the appended ones included:
	// replay's default sends nothing, starts no collector, and says so.
	if r := asUser(t, 90*time.Second, tokenEnv(), fmt.Sprintf("%s/gym-otel-spank replay --binary %s --timeout 60s --endpoint http://127.0.0.1:%s --token-env OTEL_TOKEN %s",
		plugDir, testenv.Collector(t), backendPort, jobDir)); r.code != 0 || strings.Contains(r.stdout, "collector pid") ||
		!strings.Contains(r.stdout, "replay: nothing to send: the backend has acknowledged every line of the files (delivery.json of 1 node dir; --all sends everything again)") {
		t.Errorf("replay of a job whose receipt says the backend has it all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	} else {
		t.Logf("replay: exit %d\n%s", r.code, r.stdout)
	}
	if r := replayAppended("--force"); r.code != 0 || !strings.Contains(r.stdout, "replay complete") || !strings.Contains(r.stdout, "read 2 of 2 spans") {
		t.Fatalf("replay --appended --force: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n := waitBackend(4); n != 4 {
		t.Errorf("after replay --appended --force the backend holds %d drain and epilog spans of job %s, want the two twice", n, job)
	}
}

// deliveredRE is the supervisor's log line of the appended lines'
// delivery in requests of their own: its ms.
var deliveredRE = regexp.MustCompile(`the appended lines \(\d+\) delivered to the backend \S+ in (\d+) ms`)

// TestDrainSpanNoFollow: the job's user swaps its traces.jsonl for a
// symbolic link (to a file of its own) while the collector runs. The
// supervisor appends the drain's spans as the user and never through a
// link: the link's target stays empty, the receipt lists no appended
// line, the supervisor's log says why, and the job and its drain end as
// usual.
func TestDrainSpanNoFollow(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "drainlink")
	otel := filepath.Join(d, "run", "otel")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf("srun -n1 true\n: > %[1]s/target\nrm -f %[2]s/traces.jsonl\nln -s %[1]s/target %[2]s/traces.jsonl\n", d, otel))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	waitNoCollector(t)
	if fi, err := os.Lstat(filepath.Join(otel, "traces.jsonl")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("traces.jsonl is not the job's symbolic link any more: %v %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(d, "target")); err != nil || len(b) != 0 {
		t.Errorf("the link's target holds %d bytes (%v): the supervisor wrote through the link", len(b), err)
	}
	rb, err := os.ReadFile(filepath.Join(otel, "receipt.json"))
	if err != nil || strings.Contains(string(rb), `"appended"`) {
		t.Errorf("receipt.json (%v) lists an appended line: %s", err, rb)
	}
	log, _ := os.ReadFile(filepath.Join(otel, "supervisor.log"))
	if !strings.Contains(string(log), "the drain's phase spans could not be written to traces.jsonl") {
		t.Errorf("the supervisor's log does not say the drain's spans were not written:\n%s", log)
	}
	waitIdle(t)
}

// TestJobExitCodeFromEpilog: a batch script that exits 3. slurmd gives
// the job epilog the job's exit code (SLURM_JOB_EXIT_CODE, the wait status
// 768; SLURM_JOB_DERIVED_EC), the epilog tells it to the supervisor with
// its start, and the slurm.epilog span carries it (slurm.job.exit_code 3,
// signal 0, from SLURM_JOB_EXIT_CODE); inspect, with sacct not asked,
// reads the outcome from it: FAILED, exit code 3, labelled as the
// epilog's.
func TestJobExitCodeFromEpilog(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "exit3")
	script := writeScript(t, filepath.Base(d)+".sh", "echo running\nexit 3\n")
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	job := jobIDOf(t, r)
	waitJobsGone(t, patience, []string{job})
	waitNoCollector(t)
	otel := filepath.Join(d, "run", "otel")
	var epilog *phaseSpan
	spans := phaseSpans(t, otel)
	for i, s := range spans {
		if s.Name == vocab.SpanEpilog {
			epilog = &spans[i]
		}
	}
	if epilog == nil {
		t.Fatalf("no slurm.epilog span: %v", spans)
	}
	t.Logf("epilog span attributes %v", epilog.Attrs)
	if epilog.Attrs[vocab.AttrJobExitCode] != "3" || epilog.Attrs[vocab.AttrJobSignal] != "0" || epilog.Attrs[vocab.AttrJobDerivedExitCode] == "" ||
		epilog.Attrs[vocab.AttrJobExitFrom] != "SLURM_JOB_EXIT_CODE" {
		t.Errorf("the epilog span lacks the job's exit code 3: %v", epilog.Attrs)
	}
	cli := filepath.Join(root, "build", "gym-otel-spank")
	out, err := exec.Command(cli, "inspect", "--json", "--no-sacct", filepath.Join(d, "run")).Output()
	if err != nil {
		t.Fatalf("inspect --json: %v", err)
	}
	var rep inspect.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	o := rep.Outcome
	if o.State != "FAILED" || o.ExitCode == nil || *o.ExitCode != 3 || o.ExitCodeFrom != "epilog" || !strings.Contains(o.StateWhy, "SLURM_JOB_EXIT_CODE") {
		t.Errorf("outcome %+v: want FAILED, exit code 3 from the epilog", o)
	}
	text, _ := exec.Command(cli, "inspect", "--no-sacct", filepath.Join(d, "run")).CombinedOutput()
	t.Logf("inspect:\n%s", strings.Join(strings.SplitN(string(text), "\n", 8)[:7], "\n"))
	waitIdle(t)
}
