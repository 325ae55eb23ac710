package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// manyNodes makes a job dir of n nodes (gn1 .. gn<n>, n >= 2) from the
// recorded two-node job testdata/slurmrun/gym-two-nodes (slurmRun unpacks
// it into the test's temp dir): otel/ stays gn1's own (the batch node: the
// queue wait, the batch step, the Gym stand-in's 8 rollouts) and
// otel/nodes/gn3 .. gn<n> are copies of otel/nodes/gn2 with every "gn2"
// in their files (receipt.json's node, collector.yaml, the jsonl's
// host.name and cgroup paths) replaced by the copy's name. edit, when not
// nil, may change the files before the report is built. It returns the
// report, its text and the otel/ dir.
func manyNodes(t *testing.T, n int, edit func(otel string)) (*Report, []string, string) {
	t.Helper()
	_, otel := slurmRun(t, "gym-two-nodes")
	src := filepath.Join(otel, "nodes", "gn2")
	files, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for i := 3; i <= n; i++ {
		name := fmt.Sprintf("gn%d", i)
		dst := filepath.Join(otel, "nodes", name)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(src, f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, f.Name()), []byte(strings.ReplaceAll(string(data), "gn2", name)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if edit != nil {
		edit(otel)
	}
	r, lines := reportText(t, filepath.Dir(otel))
	return r, lines, otel
}

// reportText builds the report of the job dir job and writes its text,
// every line within Width columns.
func reportText(t *testing.T, job string) (*Report, []string) {
	t.Helper()
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	for _, l := range lines {
		if len([]rune(l)) > Width {
			t.Errorf("line over %d columns: %q", Width, l)
		}
	}
	return r, lines
}

// lineWith returns the index of the first of lines[:n] holding every one of
// subs, or -1.
func lineWith(lines []string, n int, subs ...string) int {
	for i, l := range lines[:min(n, len(lines))] {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			return i
		}
	}
	return -1
}

// TestManyNodesText: a 16-node job (manyNodes) reads as a person asks:
// the outcome in the first 10 lines (state COMPLETED derived from gn1's
// batch step, exit code 0, the elapsed time from slurmctld's start to the
// last job span's end, the nodes as one hostlist, the rollouts, pass rate
// and delivery), the Gym section's figures in the first 25 lines, the 16
// receipts without trouble in one line, and the phases aggregated over the
// nodes (one row a phase, not a block a node).
func TestManyNodesText(t *testing.T) {
	r, lines, _ := manyNodes(t, 16, nil)
	text := strings.Join(lines, "\n")
	for _, want := range [][]string{
		{"== outcome: job 2 COMPLETED, exit code 0 (derived: the batch step on gn1 exited 0)"},
		{"elapsed", "12.2 s (start to the batch step's end), after a queue wait of 3.0 s"},
		{"nodes", "16 gn[1-16]"},
		{"gym", "8 rollouts, pass rate 75.0% of 8 verified, 59.3 rollouts per minute"},
		{"backend", "nothing lost"},
	} {
		if lineWith(lines, 10, want...) < 0 {
			t.Errorf("the first 10 lines lack %q:\n%s", want, strings.Join(lines[:10], "\n"))
		}
	}
	for _, want := range [][]string{
		{"== gym"},
		{"rollouts (spans, ms)", "n 8"},
		{"rollout throughput", "8 in 8.10 s", "59.3 per minute"},
		{"verify", "success 75.0%"},
	} {
		if lineWith(lines, 25, want...) < 0 {
			t.Errorf("the first 25 lines lack %q:\n%s", want, strings.Join(lines[:25], "\n"))
		}
	}
	if n := strings.Count(text, ": final figures"); n != 1 || !strings.Contains(text, "\n  16 nodes gn[1-16]: final figures, nothing failed (sent to the backend: 68 spans,") ||
		strings.Contains(text, "receipt of job") {
		t.Errorf("want the 16 receipts folded into one line, got %d lines with final figures:\n%s", n, textSections(text, "receipts"))
	}
	phases := textSections(text, "Slurm phases")
	if !strings.Contains(phases, "  16 nodes gn[1-16] (job 2): each phase over the nodes") || strings.Contains(phases, "gn5 (job 2)") ||
		strings.Count(phases, "\n") > 12 {
		t.Errorf("phases not aggregated over the nodes:\n%s", phases)
	}
	for _, row := range [][]string{
		{"prolog", " 16 ", "0.243", "0.261", "max on gn1"},
		{"step 0", " 16 ", "6.470", "7.181", "max on 15 nodes", "exit 0"},
		{"step batch", " 1 ", "11.620", "on gn1"},
	} {
		if lineWith(strings.Split(phases, "\n"), 100, row...) < 0 {
			t.Errorf("no phase row with %q:\n%s", row, phases)
		}
	}
	// Every node's phases stay in the report (--json).
	if len(r.Phases) != 16 {
		t.Errorf("%d nodes' phases kept, want 16", len(r.Phases))
	}
	t.Logf("%d lines; the first 30:\n%s", len(lines), strings.Join(lines[:30], "\n"))
}

// TestManyNodesDiffer: of 16 nodes, gn7's receipt says the backend lost
// metric points and gn9's prolog took 5 s more than the others': gn7's
// receipt is on its own lines and the others fold into one line naming
// them as a hostlist; the backend line says not everything arrived, gn7's
// loss among the outcome's first lines; gn9 is named as the prolog's
// outlier.
func TestManyNodesDiffer(t *testing.T) {
	_, lines, _ := manyNodes(t, 16, func(otel string) {
		dir := filepath.Join(otel, "nodes", "gn7")
		rc, err := receipt.Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		c := rc.Signals["metrics"]
		c.Sent, c.SendFailed = c.Sent-100, 100
		rc.Signals["metrics"] = c
		if err := rc.Write(dir); err != nil {
			t.Fatal(err)
		}
		tr := filepath.Join(otel, "nodes", "gn9", "traces.jsonl")
		data, err := os.ReadFile(tr)
		if err != nil {
			t.Fatal(err)
		}
		// gn2's prolog end, recorded, 5 s later.
		const end = `"endTimeUnixNano":"1796183852496254847"`
		if !strings.Contains(string(data), end) {
			t.Fatalf("%s lacks the recorded prolog end %s", tr, end)
		}
		if err := os.WriteFile(tr, []byte(strings.Replace(string(data), end, `"endTimeUnixNano":"1796183857496254847"`, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	text := strings.Join(lines, "\n")
	if lineWith(lines, 10, "backend", "NOT everything reached it") < 0 || lineWith(lines, 10, "! gn7: LOST: the backend did not get 100 of") < 0 {
		t.Errorf("the first 10 lines do not say gn7's loss:\n%s", strings.Join(lines[:10], "\n"))
	}
	rec := textSections(text, "receipts")
	if !strings.Contains(rec, "\n  15 nodes gn[1-6,8-16]: final figures, nothing failed") || !strings.Contains(rec, "\n  receipt of job 2 on gn7: final figures") ||
		strings.Count(rec, "receipt of job") != 1 {
		t.Errorf("want gn7's receipt alone and the 15 others folded:\n%s", rec)
	}
	if lineWith(lines, len(lines), "prolog", " 16 ", "outliers: gn9 (5.243 s)") < 0 {
		t.Errorf("gn9's prolog not named as the outlier:\n%s", textSections(text, "Slurm phases"))
	}
}

// TestManyNodesJSON: the outcome in --json is an object of typed fields
// (numbers as numbers, null where not known), and every node's phases are
// there.
func TestManyNodesJSON(t *testing.T) {
	r, _, _ := manyNodes(t, 16, nil)
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Outcome map[string]any `json:"outcome"`
		Phases  []any          `json:"phases"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	o := got.Outcome
	num := func(k string, want, tol float64) {
		if v, ok := o[k].(float64); !ok || math.Abs(v-want) > tol {
			t.Errorf("outcome.%s = %#v, want the number %v", k, o[k], want)
		}
	}
	num("exit_code", 0, 0)
	num("elapsed_seconds", 12.165, 0.001)
	num("queue_wait_seconds", 3, 0)
	num("nodes", 16, 0)
	num("rollouts", 8, 0)
	num("pass_rate", 0.75, 1e-9)
	num("verified", 8, 0)
	num("rollouts_per_minute", 59.3, 0.05)
	for k, want := range map[string]any{"job_id": "2", "state": "COMPLETED", "state_from": "derived", "hostlist": "gn[1-16]",
		"delivery_state": "ok", "signal": nil} {
		if o[k] != want {
			t.Errorf("outcome.%s = %#v, want %#v", k, o[k], want)
		}
	}
	if len(got.Phases) != 16 {
		t.Errorf("%d nodes' phases in the JSON, want 16", len(got.Phases))
	}
}

// TestOutcomeDerivedAndUnknown: the cancelled job's batch step was killed
// by signal 15: SIGNALED, derived, with the signal and no exit code; a dir
// without phase spans says unknown, with why, and no elapsed time.
func TestOutcomeDerivedAndUnknown(t *testing.T) {
	r, _ := slurmRun(t, "cancelled")
	o := r.Outcome
	if o.State != "SIGNALED" || o.StateFrom != "derived" || o.Signal == nil || *o.Signal != 15 || o.ExitCode != nil ||
		!strings.Contains(o.StateWhy, "a cancel, a time limit or another signal") || !o.ElapsedSeconds.Known() {
		t.Errorf("cancelled: outcome %+v", o)
	}
	d, err := Build("testdata/otel")
	if err != nil {
		t.Fatal(err)
	}
	o = d.Outcome
	if o.State != "unknown" || o.StateFrom != "unknown" || o.StateWhy == "" || o.ElapsedSeconds.Known() || o.ElapsedWhy == "" || o.JobID != "77" {
		t.Errorf("no phases: outcome %+v", o)
	}
}

// TestOutcomeAccount: sacct's answer replaces the derived state, exit
// code and elapsed time; where it does not answer or does not know the
// job, the derived ones stay and the outcome says why.
func TestOutcomeAccount(t *testing.T) {
	r, _ := slurmRun(t, "gym-two-nodes")
	derived := r.Outcome
	var asked uint32
	r.Account(context.Background(), func(ctx context.Context, id uint32) (slurm.Accounting, bool, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("sacct asked without a deadline")
		}
		asked = id
		return slurm.Accounting{ID: id, State: "TIMEOUT", Signal: 0, ExitCode: 0, ElapsedSeconds: 60}, true, nil
	})
	if o := r.Outcome; asked != 2 || o.State != "TIMEOUT" || o.StateFrom != "sacct" || o.ElapsedSeconds != 60 || *o.ExitCode != 0 || o.Signal != nil {
		t.Errorf("asked job %d; outcome %+v", asked, o)
	}
	for _, c := range []struct {
		known bool
		err   error
		why   string
	}{{false, nil, "sacct does not know job 2"}, {false, errors.New("sacct: not in /usr/bin nor on PATH"), "no answer: sacct: not in"}} {
		r.Outcome = derived
		r.Account(context.Background(), func(context.Context, uint32) (slurm.Accounting, bool, error) {
			return slurm.Accounting{}, c.known, c.err
		})
		if o := r.Outcome; o.State != "COMPLETED" || o.StateFrom != "derived" || !strings.HasPrefix(o.Sacct, c.why) {
			t.Errorf("outcome %+v: want the derived state and sacct %q", o, c.why)
		}
	}
}

// TestManyNodesHTML: the page of the 16-node job opens on the outcome: in
// headless Chromium it is drawn above the charts and within the first
// screen, with the state and the nodes as a hostlist.
func TestManyNodesHTML(t *testing.T) {
	r, _, _ := manyNodes(t, 16, nil)
	html, page := writeReportPage(t, r)
	if html == "" {
		return
	}
	var l struct {
		OutcomeTop    float64 `json:"outcome_top"`
		OutcomeBottom float64 `json:"outcome_bottom"`
		Viewport      float64 `json:"viewport"`
		ChartsTop     float64 `json:"charts_top"`
		State         string  `json:"state"`
		Nodes         string  `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(testenv.EvalPage(t, page, "layout")), &l); err != nil {
		t.Fatal(err)
	}
	if l.OutcomeTop < 0 || l.OutcomeBottom > l.Viewport || l.OutcomeBottom > l.ChartsTop || l.State != "Job 2: COMPLETED, exit code 0" || l.Nodes != "16 nodes gn[1-16]" {
		t.Errorf("the page does not open on the outcome: %+v", l)
	}
}

// TestOutcomeFromEpilog: the job epilog's exit code (slurmd's
// SLURM_JOB_EXIT_CODE, on the slurm.epilog span as the supervisor writes
// it) makes the outcome when sacct cannot answer, labelled with its
// source: the cancelled job's epilog span given a job that exited 3 reads
// FAILED, exit code 3, from the epilog; given signal 15, SIGNALED.
func TestOutcomeFromEpilog(t *testing.T) {
	for _, c := range []struct {
		code, sig int
		state     string
	}{{3, 0, "FAILED"}, {0, 15, "SIGNALED"}} {
		_, otel := slurmRun(t, "cancelled")
		tr := filepath.Join(otel, "traces.jsonl")
		data, err := os.ReadFile(tr)
		if err != nil {
			t.Fatal(err)
		}
		const known = `{"key":"slurm.end_known","value":{"boolValue":false}}]`
		i := strings.Index(string(data), `"name":"slurm.epilog"`)
		j := strings.Index(string(data[max(i, 0):]), known)
		if i < 0 || j < 0 {
			t.Fatalf("%s: no epilog span with slurm.end_known", tr)
		}
		at := i + j + len(known) - 1
		attrs := fmt.Sprintf(`,{"key":"slurm.job.exit_code","value":{"intValue":"%d"}},{"key":"slurm.job.signal","value":{"intValue":"%d"}},`+
			`{"key":"slurm.job.derived_exit_code","value":{"intValue":"%d"}},{"key":"slurm.job.derived_signal","value":{"intValue":"0"}},`+
			`{"key":"slurm.job.exit_from","value":{"stringValue":"SLURM_JOB_EXIT_CODE"}}`, c.code, c.sig, c.code)
		if err := os.WriteFile(tr, []byte(string(data[:at])+attrs+string(data[at:])), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Build(filepath.Dir(otel))
		if err != nil {
			t.Fatal(err)
		}
		o := r.Outcome
		if o.State != c.state || o.ExitCodeFrom != "epilog" || o.StateFrom != "derived" || !strings.Contains(o.StateWhy, "the job epilog on gn1 had SLURM_JOB_EXIT_CODE") ||
			(c.sig == 0 && (o.ExitCode == nil || *o.ExitCode != c.code)) || (c.sig != 0 && (o.Signal == nil || *o.Signal != c.sig)) {
			t.Errorf("exit %d signal %d: outcome %+v", c.code, c.sig, o)
		}
		var b strings.Builder
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(b.String(), "\n"); lineWith(lines, 4, "== outcome", c.state, "the job epilog on gn1 had") < 0 {
			t.Errorf("no outcome line from the epilog:\n%s", strings.Join(lines[:4], "\n"))
		}
		r.Account(context.Background(), func(context.Context, uint32) (slurm.Accounting, bool, error) {
			return slurm.Accounting{ID: 9, State: "CANCELLED", ExitCode: 0, Signal: 15, ElapsedSeconds: 9}, true, nil
		})
		if o := r.Outcome; o.State != "CANCELLED" || o.ExitCodeFrom != "sacct" {
			t.Errorf("sacct's answer does not replace the epilog's: %+v", o)
		}
	}
}
