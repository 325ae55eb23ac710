package inspect

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tspan is one job span in OTLP JSON: trace, id, parent, links
// ("trace/span" each), from ms start to ms end.
func tspan(name, trace, id, parent string, start, end int64, links ...string) string {
	var ls []string
	for _, l := range links {
		tr, sp, _ := strings.Cut(l, "/")
		ls = append(ls, fmt.Sprintf(`{"traceId":%q,"spanId":%q}`, tr, sp))
	}
	return fmt.Sprintf(`{"traceId":%q,"spanId":%q,"parentSpanId":%q,"name":%q,"kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","links":[%s],"status":{}}`,
		trace, id, parent, name, ns(0)+start*1e6, ns(0)+end*1e6, strings.Join(ls, ","))
}

func tline(node, producer, instance string, spans ...string) string {
	return fmt.Sprintf(`{"resourceSpans":[{"resource":%s,"scopeSpans":[{"scope":{"name":"nemo-gym"},"spans":[%s]}]}]}`+"\n",
		res(node, producer, instance), strings.Join(spans, ","))
}

// TestTraceTree: a job's processes under their steps and their rollouts
// under them, whatever the order of the file: the Gym server the batch
// script ran (its root span a child of slurm.batch_script) with two
// rollouts linked to it, each a trace of its own whose child spans come
// first; the one of step 0 whose rollout has no link (placed by the
// process's resource); one run with a TRACEPARENT of the user's (not under
// a step: its rollout is not placed). The job's spans come before the
// phase spans, as a step's span is written at its end.
func TestTraceTree(t *testing.T) {
	const (
		job      = "5c4b0f2a9d3e4c1b8a7f6e5d4c3b2a19" // phase()'s trace
		user     = "0af7651916cd43dd8448eb211c80319c"
		root     = "1000000000000001"
		batch    = "1000000000000005"
		script   = "1000000000000008"
		step0    = "1000000000000006"
		procB    = "aaaaaaaaaaaaaaa1"
		procS    = "aaaaaaaaaaaaaaa2"
		procU    = "aaaaaaaaaaaaaaa3"
		rollout1 = "11111111111111111111111111111111"
		rollout2 = "22222222222222222222222222222222"
		rollout3 = "33333333333333333333333333333333"
		rollout4 = "44444444444444444444444444444444"
	)
	var b strings.Builder
	b.WriteString(tline("gn1", "nemo-gym/batchgym", "i1",
		tspan("gym.model.chat_completions", rollout1, "c000000000000001", "r000000000000001", 4100, 4200),
		tspan("gym.rollout", rollout1, "r000000000000001", "", 4000, 4300, job+"/"+procB),
		tspan("gym.model.chat_completions", rollout2, "c000000000000002", "r000000000000002", 4400, 4500),
		tspan("gym.rollout", rollout2, "r000000000000002", "", 4350, 4600, job+"/"+procB),
		tspan("gym.run", job, procB, script, 3900, 4700)))
	b.WriteString(tline("gn1", "nemo-gym/stepgym", "i2",
		tspan("gym.rollout", rollout3, "r000000000000003", "", 3600, 3700),
		tspan("gym.run", job, procS, step0, 3550, 3800)))
	b.WriteString(tline("gn1", "nemo-gym/usergym", "i3",
		tspan("gym.rollout", rollout4, "r000000000000004", "", 5000, 5100, user+"/"+procU),
		tspan("gym.run", user, procU, "b7ad6b7169203331", 4950, 5200)))
	b.WriteString(phaseLine("gn1",
		phase("gn1", vocab.SpanStep, step0, root, 3500, 4500, "", "", sAttr(vocab.AttrStepID, "0"), bAttr(vocab.AttrEndKnown, true)),
		phase("gn1", vocab.SpanStep, batch, root, 3000, 11000, "", "", sAttr(vocab.AttrStepID, "batch"), bAttr(vocab.AttrEndKnown, true)),
		phase("gn1", vocab.SpanBatchScript, script, batch, 3000, 10000, "", "", bAttr(vocab.AttrEndKnown, true)),
		phase("gn1", vocab.SpanJob, root, "", 0, 12000, "", "", sAttr(vocab.AttrJobID, "42"), bAttr(vocab.AttrStartKnown, true))))
	dir := filepath.Join(t.TempDir(), "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "traces.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr := r.TraceTree
	js, _ := json.MarshalIndent(tr, "", "  ")
	if len(tr.Runs) != 1 || tr.Runs[0].TraceID != job {
		t.Fatalf("runs: %s", js)
	}
	got := map[string]string{}
	for _, st := range tr.Runs[0].Steps {
		for _, p := range st.Processes {
			got[st.Step] += fmt.Sprintf("%s %s %s under %s: %d linked %d by resource;", p.Name, p.Producer, p.SpanID, p.Under, p.Linked, p.ByResource)
		}
	}
	want := map[string]string{
		"batch": "gym.run nemo-gym/batchgym " + procB + " under slurm.batch_script: 2 linked 0 by resource;",
		"0":     "gym.run nemo-gym/stepgym " + procS + " under slurm.step: 0 linked 1 by resource;",
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("step %s: %q, want %q", k, got[k], want[k])
		}
	}
	if len(got) != len(want) {
		t.Errorf("steps with processes %v, want %v", got, want)
	}
	if tr.Rollouts != 4 || tr.Linked != 2 || tr.ByResource != 1 || tr.Unplaced != 1 || tr.Dropped != 0 {
		t.Errorf("rollouts %d linked %d by resource %d unplaced %d dropped %d, want 4 2 1 1 0", tr.Rollouts, tr.Linked, tr.ByResource, tr.Unplaced, tr.Dropped)
	}
	for _, st := range tr.Runs[0].Steps {
		for _, p := range st.Processes {
			if p.Name == "gym.run" && p.Producer == "nemo-gym/batchgym" &&
				(p.FirstRollout == nil || !p.FirstRollout.Equal(unixMs(ns(0)/1e6+4000)) || !p.LastRollout.Equal(unixMs(ns(0)/1e6+4600))) {
				t.Errorf("batchgym's rollouts from %v to %v, want 4.0 s to 4.6 s", p.FirstRollout, p.LastRollout)
			}
		}
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	out := textSections(text.String(), "trace tree")
	t.Log("\n" + out)
	for _, w := range []string{
		"== trace tree: job -> step -> process -> rollouts",
		"    gn1 step batch (span " + batch + ")",
		"      gym.run nemo-gym/batchgym in the batch script: 0.8 s, 2 rollouts (2 by link, 0 by resource)",
		"      gym.run nemo-gym/stepgym: 0.2 s, 1 rollouts (0 by link, 1 by resource)",
		"4 rollouts: 3 under a process (2 by link, 1 by resource), 1 not placed",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("the text lacks %q", w)
		}
	}
}

// TestTraceTreeBounded: rollouts' child spans (a trace's spans written
// before its root) never stay kept once the root is read, and past the
// bound of kept spans the report says spans were dropped.
func TestTraceTreeBounded(t *testing.T) {
	a := newAggregator()
	for i := 0; i < 3*maxTreeCandidates; i++ {
		tr := fmt.Sprintf("%032x", i+1)
		child := span{TraceID: tr, SpanID: "c1", ParentSpanID: "r1", Name: "gym.model.chat_completions"}
		rootSp := span{TraceID: tr, SpanID: "r1", Name: "gym.rollout"}
		a.treeSpan(&child, "gn1", "p", "id")
		a.treeSpan(&rootSp, "gn1", "p", "id")
	}
	if a.tree.ncands != 0 || len(a.tree.cands) != 0 || a.tree.dropped != 0 {
		t.Errorf("kept %d spans of %d traces, dropped %d: want none kept once the roots are read", a.tree.ncands, len(a.tree.cands), a.tree.dropped)
	}
	for i := 0; i < maxTreeCandidates+5; i++ {
		orphan := span{TraceID: "ff", SpanID: fmt.Sprintf("%016x", i), ParentSpanID: "p", Name: "x"}
		a.treeSpan(&orphan, "gn1", "p", "id")
	}
	if a.tree.ncands != maxTreeCandidates || a.tree.dropped != 5 || a.traceTree().Dropped != 5 {
		t.Errorf("kept %d dropped %d, want %d and 5", a.tree.ncands, a.tree.dropped, maxTreeCandidates)
	}
}

// TestSlurmRunTraceTree: the job of tests/plugin TestTraceParent on real
// Slurm (testdata/slurmrun/traceparent): the Gym stand-in the batch script
// ran under the batch step, the one of step 0 under it, each with its two
// rollouts by link; the run with a TRACEPARENT of the user's outside the
// job's steps, its one rollout not placed. Text and JSON goldens of the
// tree.
func TestSlurmRunTraceTree(t *testing.T) {
	r, otel := slurmRun(t, "traceparent")
	tr := r.TraceTree
	if len(tr.Runs) != 1 || tr.Rollouts != 5 || tr.Linked != 4 || tr.ByResource != 0 || tr.Unplaced != 1 {
		t.Errorf("runs %d, rollouts %d linked %d by resource %d not placed %d; want 1, 5 4 0 1", len(tr.Runs), tr.Rollouts, tr.Linked, tr.ByResource, tr.Unplaced)
	}
	placed := map[string]string{}
	for _, run := range tr.Runs {
		for _, st := range run.Steps {
			for _, p := range st.Processes {
				placed[st.Step] += fmt.Sprintf("%s %s %d;", p.Name, p.Producer, p.Linked)
			}
		}
	}
	if placed["batch"] != "gym.run nemo-gym/batchgym 2;" || placed["0"] != "gym.run nemo-gym/stepgym 2;" || len(placed) != 2 {
		t.Errorf("processes by step %v", placed)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	if err := r.WriteHTML(&page, nil); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`<table id="tracetree">`, `<td>gn1</td><td class="l">batch</td><td class="l">gym.run</td><td class="l">nemo-gym/batchgym</td>`,
		`<td class="l">0</td><td class="l">gym.run</td><td class="l">nemo-gym/stepgym</td>`, "5 rollouts: 4 by link, 0 by resource, 1 not placed."} {
		if !strings.Contains(page.String(), w) {
			t.Errorf("the page lacks %s", w)
		}
	}
	js, err := json.MarshalIndent(tr, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for file, got := range map[string]string{
		"tree.golden.txt":  textSections(text.String(), "trace tree"),
		"tree.golden.json": string(js) + "\n",
	} {
		got = strings.ReplaceAll(got, otel, "/jobs/traceparent/otel")
		path := filepath.Join("testdata", "slurmrun", "traceparent", file)
		if *updateSlurmRuns {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -run %s -update-slurm-runs writes it)", err, t.Name())
		}
		if string(want) != got {
			t.Errorf("%s differs (go test -update-slurm-runs rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
		}
	}
}
