package supervise

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestPhaseC: the steps' C code (spank/phase.c through spank/controlsock.c,
// as slurmstepd runs it) against this side's real handler of the hold
// socket, on a socket of root's in a root-only dir as the prolog makes it:
// before the collector is ready the step's lines are not taken and its
// tasks get no TRACEPARENT; then the batch step's tasks get the
// traceparent of its slurm.batch_script span and an srun step's that of
// its slurm.step span, and each step's end (its tasks' worst exit code,
// the first signal, the number of tasks) makes the spans those ids name;
// another user's step gets nothing and makes no span.
func TestPhaseC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the steps trust root's control socket only: run as root")
	}
	bin := testenv.PhaseDriver(t)
	srv, path := startControl(t)
	step := func(as []string, id uint32, statuses ...string) (traceparent, debug string) {
		t.Helper()
		argv := append(append(as, bin, path, strconv.FormatUint(uint64(id), 10)), statuses...)
		cmd := exec.Command(argv[0], argv[1:]...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, stderr.String())
		}
		tp, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "traceparent=")
		if !ok {
			t.Fatalf("%v printed %q", argv, out)
		}
		return tp, stderr.String()
	}
	// Before the collector is ready: no answer, the step goes on.
	if tp, debug := step(nil, 7, "0"); tp != "" || !strings.Contains(debug, "did not take the step's start") || !strings.Contains(debug, "did not take the step's end") {
		t.Fatalf("before the phases began: traceparent %q, debug %q", tp, debug)
	}
	f := jobfacts.Facts{JobID: "42", Node: "n1", Cluster: "c", RestartCount: "0"}
	p := newPhases(f, time.Now().Add(-time.Minute), time.Now().Add(-time.Minute))
	srv.phases.Store(p)
	srv.stepUID = 0

	const exited3, killed9 = "768", "9" // wait statuses: exit code 3, SIGKILL
	batchTP, debug := step(nil, stepBatch, "0")
	if debug != "" {
		t.Errorf("the batch step: %s", debug)
	}
	srunTP, debug := step(nil, 0, "0", exited3, "-")
	if debug != "" {
		t.Errorf("step 0: %s", debug)
	}
	if _, debug := step(nil, 1, exited3, killed9); debug != "" {
		t.Errorf("step 1: %s", debug)
	}
	// Another user cannot reach the socket: its step makes no span.
	if tp, debug := step([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, 5, "0"); tp != "" || debug == "" {
		t.Errorf("another user's step: traceparent %q, debug %q", tp, debug)
	}
	p.end(time.Now())
	spans := p.take()
	trace := fmt.Sprintf("%x", JobTraceID(f))
	spanTP := func(name, step string) string {
		for _, s := range byName(spans, name) {
			if step == "" || attr(s, vocab.AttrStepID) == step {
				return fmt.Sprintf("00-%s-%x-01", trace, s.SpanId)
			}
		}
		t.Fatalf("no %s span of step %q in %d spans", name, step, len(spans))
		return ""
	}
	if want := spanTP(vocab.SpanBatchScript, ""); batchTP != want {
		t.Errorf("the batch step's tasks got %q, its batch script span is %s", batchTP, want)
	}
	if want := spanTP(vocab.SpanStep, "0"); srunTP != want {
		t.Errorf("step 0's tasks got %q, its span is %s", srunTP, want)
	}
	// The steps' ends as the tasks' exits gave them (the worst exit code,
	// or the first signal; attrInt: -1 when absent).
	want := map[string]map[string]int64{
		"batch": {vocab.AttrStepExitCode: 0, vocab.AttrStepSignal: -1, vocab.AttrStepTasks: 1},
		"0":     {vocab.AttrStepExitCode: 3, vocab.AttrStepSignal: -1, vocab.AttrStepTasks: 2},
		"1":     {vocab.AttrStepExitCode: -1, vocab.AttrStepSignal: 9, vocab.AttrStepTasks: 2},
	}
	got := 0
	for _, s := range byName(spans, vocab.SpanStep) {
		id := attr(s, vocab.AttrStepID).(string)
		w, ok := want[id]
		if !ok {
			t.Errorf("a span of step %s", id)
			continue
		}
		got++
		for k, v := range w {
			if a := attrInt(s, k); a != v {
				t.Errorf("step %s's %s = %d, want %d", id, k, a, v)
			}
		}
		if !attrBool(s, vocab.AttrEndKnown) {
			t.Errorf("step %s's end is not known: %v", id, s.Attributes)
		}
	}
	if got != len(want) {
		t.Errorf("%d step spans, want %d", got, len(want))
	}
}
