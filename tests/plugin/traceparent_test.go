package plugin_test

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestTraceParent: every task gets TRACEPARENT, the span it runs in, so
// that a process's root span is a child of its Slurm step. The Gym
// stand-in run by the batch script directly has its root span (gym.run)
// under the slurm.batch_script span, the one run by an srun step under
// that step's slurm.step span, both in the job's phase trace; each
// rollout is a trace of its own with a link to its process's root span.
// A step launched with a TRACEPARENT of the user's keeps it: its
// stand-in's root span is a child of the user's context, not the step's.
func TestTraceParent(t *testing.T) {
	waitIdle(t)
	gym := testenv.Standin(t, "gym-standin")
	if out, err := run("install", "-m", "0755", gym, filepath.Join(plugDir, "gym-standin")); err != nil {
		t.Fatalf("install %s: %v %s", gym, err, out)
	}
	const (
		userTrace = "0af7651916cd43dd8448eb211c80319c"
		userSpan  = "b7ad6b7169203331"
	)
	userTP := "00-" + userTrace + "-" + userSpan + "-01"
	d := markerDir(t, "traceparent")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
echo "batch TRACEPARENT=$TRACEPARENT"
%[1]s/gym-standin --server batchgym --rollouts 2 || exit 9
srun -n1 %[1]s/gym-standin --server stepgym --rollouts 2 || exit 9
TRACEPARENT=%[2]s srun -n1 bash -c 'echo "user TRACEPARENT=$TRACEPARENT"'
TRACEPARENT=%[2]s srun -n1 %[1]s/gym-standin --server usergym --rollouts 1 || exit 9
`, plugDir, userTP))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -w gn1 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	out, _ := os.ReadFile(d + "/job.out")
	if r.code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	job := jobIDOf(t, r)
	waitNoCollector(t)
	otelDir := filepath.Join(d, "run", "otel")
	phases := phaseSpans(t, otelDir)
	var jobTrace, batchScript string
	stepSpan := map[string]string{} // step id -> span id
	for _, s := range phases {
		switch s.Name {
		case vocab.SpanJob:
			jobTrace = s.Trace
		case vocab.SpanBatchScript:
			batchScript = s.ID
		case vocab.SpanStep:
			stepSpan[s.Attrs[vocab.AttrStepID]] = s.ID
		}
	}
	if jobTrace == "" || batchScript == "" || stepSpan["0"] == "" || stepSpan["2"] == "" {
		t.Fatalf("job %s: phase spans lack the job, the batch script or steps 0 and 2: %v", job, phases)
	}
	if !strings.Contains(string(out), "batch TRACEPARENT=00-"+jobTrace+"-"+batchScript+"-01\n") {
		t.Errorf("the batch script's TRACEPARENT is not its span (00-%s-%s-01):\n%s", jobTrace, batchScript, out)
	}
	if !strings.Contains(string(out), "user TRACEPARENT="+userTP+"\n") {
		t.Errorf("the user's TRACEPARENT was not kept:\n%s", out)
	}

	traces := otlptest.MustRead(t, otelDir, "traces")
	procs := map[string]otlptest.Span{} // server -> its gym.run
	for _, s := range traces.Spans {
		if s.Name == "gym.run" {
			srv, _ := s.Attributes.Str("nemo.gym.process.service")
			procs[strings.TrimPrefix(srv, "nemo-gym/")] = s
		}
	}
	want := map[string][2]string{ // server -> the trace and parent span its root span must have
		"batchgym": {jobTrace, batchScript},
		"stepgym":  {jobTrace, stepSpan["0"]},
		"usergym":  {userTrace, userSpan},
	}
	for srv, w := range want {
		p, ok := procs[srv]
		if !ok {
			t.Errorf("%s: no process root span (gym.run) in traces.jsonl", srv)
			continue
		}
		if p.TraceID != w[0] || p.ParentSpanID != w[1] {
			t.Errorf("%s: root span in trace %s under %s, want trace %s under %s", srv, p.TraceID, p.ParentSpanID, w[0], w[1])
		}
	}
	rollouts := map[string]int{} // server -> rollouts linked to its root span
	for _, s := range traces.Spans {
		if s.Name != "gym.rollout" {
			continue
		}
		linked := ""
		for srv, p := range procs {
			for _, l := range s.Links {
				if l.TraceID == p.TraceID && l.SpanID == p.SpanID {
					linked = srv
				}
			}
		}
		if linked == "" || s.ParentSpanID != "" || s.TraceID == procs[linked].TraceID {
			t.Errorf("rollout %s/%s (parent %q, links %v): want a root of its own trace linked to its process's root span",
				s.TraceID, s.SpanID, s.ParentSpanID, s.Links)
			continue
		}
		rollouts[linked]++
	}
	if rollouts["batchgym"] != 2 || rollouts["stepgym"] != 2 || rollouts["usergym"] != 1 {
		t.Errorf("rollouts linked per process %v, want batchgym 2, stepgym 2, usergym 1", rollouts)
	}
	t.Logf("job %s: trace %s; batch script %s, step 0 %s; process root spans %d, linked rollouts %v",
		job, jobTrace, batchScript, stepSpan["0"], len(procs), rollouts)

	// inspect's tree: the job's run, the batch step with the batch
	// script's process, step 0 with the srun's, each with its rollouts by
	// link; the user's run (its own trace) is not under a step.
	cli := filepath.Join(root, "build", "gym-otel-spank")
	js, err := exec.Command(cli, "inspect", "--json", filepath.Join(d, "run")).Output()
	if err != nil {
		t.Fatalf("inspect --json: %v", err)
	}
	var rep inspect.Report
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	tree := rep.TraceTree
	if len(tree.Runs) != 1 || tree.Runs[0].TraceID != jobTrace {
		t.Fatalf("inspect's tree: runs %+v, want the job's trace %s", tree.Runs, jobTrace)
	}
	placed := map[string]string{} // step -> its processes
	for _, st := range tree.Runs[0].Steps {
		for _, p := range st.Processes {
			placed[st.Step] += fmt.Sprintf("%s %s under %s, %d linked %d by resource;", p.Name, p.Producer, p.Under, p.Linked, p.ByResource)
		}
	}
	for step, w := range map[string]string{
		"batch": "gym.run nemo-gym/batchgym under slurm.batch_script, 2 linked 0 by resource;",
		"0":     "gym.run nemo-gym/stepgym under slurm.step, 2 linked 0 by resource;",
	} {
		if placed[step] != w {
			t.Errorf("inspect's tree, step %s: %q, want %q", step, placed[step], w)
		}
	}
	if len(placed) != 2 || tree.Rollouts != 5 || tree.Linked != 4 || tree.Unplaced != 1 {
		t.Errorf("inspect's tree: processes %v; rollouts %d, linked %d, not placed %d; want 2 steps, 5, 4, 1 (the user's run)",
			placed, tree.Rollouts, tree.Linked, tree.Unplaced)
	}
	text, err := exec.Command(cli, "inspect", filepath.Join(d, "run")).CombinedOutput()
	if err != nil || !strings.Contains(string(text), "== trace tree: job -> step -> process -> rollouts") {
		t.Errorf("inspect's text has no tree: %v\n%s", err, text)
	}
	waitIdle(t)
}
