package supervise

import (
	"context"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
)

func byName(spans []*tracev1.Span, name string) []*tracev1.Span {
	var r []*tracev1.Span
	for _, s := range spans {
		if s.GetName() == name {
			r = append(r, s)
		}
	}
	return r
}

// A job of a batch step and two srun steps, one failing, one never ended
// (the job cancelled): each step a span under the node's root, the batch
// script and the final wait under the batch step, the open step ended at
// the drain and marked, the trace id the same for another node of the job.
func TestPhasesSpans(t *testing.T) {
	f := jobfacts.Facts{JobID: "42", Node: "n1", Cluster: "c", RestartCount: "0"}
	t0 := time.UnixMilli(1_700_000_000_000)
	p := newPhases(f, t0, t0.Add(time.Second))
	p.ready(t0.Add(300 * time.Millisecond))
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	for _, l := range []string{
		fmt.Sprintf("step start %d %d\n", uint32(stepBatch), ms(time.Second)),
		fmt.Sprintf("step start 0 %d\n", ms(2*time.Second)),
		fmt.Sprintf("step end 0 %d %d %d 0 3 0 2\n", ms(2*time.Second), ms(4*time.Second), ms(4*time.Second)),
		fmt.Sprintf("step start 1 %d\n", ms(5*time.Second)),
		fmt.Sprintf("step end %d %d %d %d %d 0 0 1\n", uint32(stepBatch), ms(time.Second), ms(8*time.Second), ms(6*time.Second), ms(8*time.Second)),
	} {
		if got := p.handle(l); got != "ok\n" && !strings.HasPrefix(got, "ok 00-") {
			t.Fatalf("%q: %q", l, got)
		}
	}
	for _, bad := range []string{"step start x 1\n", "step end 0 1 2\n", "hello\n", "step start 1 -5\n"} {
		if got := p.handle(bad); got == "ok\n" {
			t.Errorf("%q taken", bad)
		}
	}
	p.end(t0.Add(10 * time.Second))
	spans := p.take()
	if n := len(spans); n != 7 {
		t.Fatalf("%d spans, want 7 (job, prolog, 3 steps, batch script, final wait)", n)
	}
	root := byName(spans, vocab.SpanJob)[0]
	for _, s := range spans {
		if string(s.TraceId) != string(JobTraceID(f)) {
			t.Errorf("%s: trace %x", s.Name, s.TraceId)
		}
		if s != root && len(s.ParentSpanId) == 0 {
			t.Errorf("%s has no parent", s.Name)
		}
	}
	other := jobfacts.Facts{JobID: "42", Node: "n2", Cluster: "c", RestartCount: "0"}
	if string(JobTraceID(other)) != string(JobTraceID(f)) || string(newPhases(other, t0, t0).root) == string(p.root) {
		t.Error("another node of the job: same trace, another root wanted")
	}
	if string(JobTraceID(jobfacts.Facts{JobID: "42", Cluster: "c", RestartCount: "1"})) == string(JobTraceID(f)) {
		t.Error("a requeued run shares the trace")
	}
	steps := map[string]*tracev1.Span{}
	for _, s := range byName(spans, vocab.SpanStep) {
		steps[attr(s, vocab.AttrStepID).(string)] = s
	}
	if s := steps["0"]; s == nil || s.Status.GetCode() != tracev1.Status_STATUS_CODE_ERROR || time.Duration(s.EndTimeUnixNano-s.StartTimeUnixNano) != 2*time.Second {
		t.Errorf("step 0: %v", s)
	}
	if s := steps["1"]; s == nil || s.Status.GetCode() != tracev1.Status_STATUS_CODE_ERROR || s.EndTimeUnixNano != uint64(t0.Add(10*time.Second).UnixNano()) {
		t.Errorf("step 1 (never ended): %v", s)
	}
	b := steps["batch"]
	bs, fw := byName(spans, vocab.SpanBatchScript)[0], byName(spans, vocab.SpanFinalWait)[0]
	if string(bs.ParentSpanId) != string(b.SpanId) || string(fw.ParentSpanId) != string(b.SpanId) {
		t.Error("batch script and final wait not under the batch step")
	}
	if time.Duration(fw.EndTimeUnixNano-fw.StartTimeUnixNano) != 2*time.Second || b.Status != nil {
		t.Errorf("final wait %v, batch status %v", fw, b.Status)
	}
	if pr := byName(spans, vocab.SpanProlog)[0]; time.Duration(pr.EndTimeUnixNano-pr.StartTimeUnixNano) != 300*time.Millisecond {
		t.Errorf("prolog: %v", pr)
	}
}

// Past MaxStepSpans the steps fold into one aggregated span: the output
// stays bounded whatever the number of steps.
func TestPhasesBounded(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000)
	p := newPhases(jobfacts.Facts{JobID: "7", Node: "n"}, time.Time{}, t0)
	for i := 0; i < 5000; i++ {
		s := t0.Add(time.Duration(i) * time.Second).UnixMilli()
		exit := 0
		if i%10 == 0 {
			exit = 1
		}
		if got := p.handle(fmt.Sprintf("step end %d %d %d 0 0 %d 0 1\n", i, s, s+500, exit)); got != "ok\n" {
			t.Fatal(got)
		}
	}
	p.end(t0.Add(time.Hour * 2))
	spans := p.take()
	if n := len(byName(spans, vocab.SpanStep)); n != MaxStepSpans {
		t.Errorf("%d step spans, want %d", n, MaxStepSpans)
	}
	agg := byName(spans, vocab.SpanStepsAggregated)
	if len(agg) != 1 {
		t.Fatalf("%d aggregated spans", len(agg))
	}
	want := map[string]int64{vocab.AttrStepsCount: 4900, vocab.AttrStepsFailed: 490, vocab.AttrStepsWorstExitCode: 1, vocab.AttrStepsTotalMs: 4900 * 500}
	for _, a := range agg[0].Attributes {
		if w, ok := want[a.Key]; ok && a.Value.GetIntValue() != w {
			t.Errorf("%s = %d, want %d", a.Key, a.Value.GetIntValue(), w)
		}
	}
	if r := byName(spans, vocab.SpanJob)[0]; r.StartTimeUnixNano != uint64(t0.UnixNano()) || attrBool(r, vocab.AttrStartKnown) {
		t.Error("an unknown prolog start is not marked")
	}
}

func attrBool(s *tracev1.Span, k string) bool {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value.GetBoolValue()
		}
	}
	return false
}

// The export is OTLP/HTTP protobuf with the receiver token; a refused
// export keeps the spans for the next one.
func TestPhasesExport(t *testing.T) {
	var got []*tracev1.Span
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		if fail {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var td tracev1.TracesData
		if err := proto.Unmarshal(b, &td); err != nil {
			t.Error(err)
		}
		for _, rs := range td.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				got = append(got, ss.Spans...)
			}
		}
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	p := newPhases(jobfacts.Facts{JobID: "1", Node: "n"}, time.Now(), time.Now())
	p.ready(time.Now())
	if _, err := p.export(context.Background(), port, "tok"); err == nil {
		t.Fatal("a refused export reported no error")
	}
	fail = false
	if n, err := p.export(context.Background(), port, "tok"); err != nil || n != 1 || len(got) != 1 || got[0].Name != vocab.SpanProlog {
		t.Fatalf("n=%d err=%v got=%v", n, err, got)
	}
}

// attr is a string attribute's value ("" when absent).
func attr(s *tracev1.Span, k string) any {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == k {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

// The steps' lines reach the phases through the control socket, which answers
// "ok"; before the collector is ready (no phases yet) a line gets no
// answer. The exchange's cost is logged (a step pays two).
func TestControlSocketPhaseLines(t *testing.T) {
	s, path := startControl(t)
	say := func(line string) string {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := say("step start 3 1700000000000\n"); got != "" {
		t.Fatalf("answered %q before the phases began", got)
	}
	p := newPhases(jobfacts.Facts{JobID: "1", Node: "n"}, time.Now(), time.Now())
	s.phases.Store(p)
	if os.Getuid() != 0 {
		// A step line of the supervisor's own user (not slurmstepd's
		// root) is not taken.
		if got := say("step end 7 1700000000000 1700000001000 0 0 0 0 1\n"); got != "" {
			t.Fatalf("a step line of the job's user answered %q", got)
		}
	}
	s.stepUID = uint32(os.Getuid())
	const n = 200
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if got := say(fmt.Sprintf("step end %d 1700000000000 1700000001000 0 0 0 0 1\n", i)); got != "ok\n" {
			t.Fatalf("answer %q", got)
		}
	}
	t.Logf("one phase line on the control socket: %v (connect, line, answer)", time.Since(t0)/n)
	if got := say("sampled\n"); got != "" {
		t.Errorf("sampled before the follower knows: %q", got)
	}
	p.end(time.Now())
	if n := len(byName(p.take(), vocab.SpanStep)); n != MaxStepSpans {
		t.Errorf("%d step spans", n)
	}
}

// The first node's queue wait: squeue's submit and start (unix seconds)
// make slurm.queue_wait, and the node's job span starts at the submit; an
// unanswered query leaves no span and says why on the job's span.
func TestPhasesQueueWait(t *testing.T) {
	t0 := time.Unix(1_700_000_100, 0)
	p := newPhases(jobfacts.Facts{JobID: "9", Node: "n"}, t0, t0)
	p.queueWait(context.Background(), func(context.Context, string) (time.Time, time.Time, error) {
		return time.Unix(1700000000, 0), time.Unix(1700000099, 0), nil
	})
	p.end(t0.Add(time.Minute))
	spans := p.take()
	q := byName(spans, vocab.SpanQueueWait)
	if len(q) != 1 || time.Duration(q[0].EndTimeUnixNano-q[0].StartTimeUnixNano) != 99*time.Second {
		t.Fatalf("queue wait: %v", q)
	}
	if r := byName(spans, vocab.SpanJob)[0]; r.StartTimeUnixNano != q[0].StartTimeUnixNano {
		t.Error("the job's span does not start at the submit")
	}
	p = newPhases(jobfacts.Facts{JobID: "9", Node: "n"}, t0, t0)
	p.queueWait(context.Background(), func(context.Context, string) (time.Time, time.Time, error) {
		return time.Time{}, time.Time{}, fmt.Errorf("squeue: no answer")
	})
	p.end(t0.Add(time.Minute))
	spans = p.take()
	if len(byName(spans, vocab.SpanQueueWait)) != 0 || attr(byName(spans, vocab.SpanJob)[0], vocab.AttrQueueUnknown) != "squeue: no answer" {
		t.Error("an unanswered query is not marked")
	}
}

// A step's start is answered with the trace context its tasks run in:
// the step's slurm.step span, the batch step's slurm.batch_script span
// (the span wrapping the script), a step past MaxStepSpans the aggregated
// span; the same line again gets the same answer, and the spans made at
// the ends carry exactly those ids in the job's trace.
func TestPhasesStepContext(t *testing.T) {
	f := jobfacts.Facts{JobID: "42", Node: "n1", Cluster: "c", RestartCount: "0"}
	t0 := time.UnixMilli(1_700_000_000_000)
	p := newPhases(f, t0, t0)
	parse := func(answer string) (trace, span string) {
		t.Helper()
		tp, ok := strings.CutPrefix(answer, "ok ")
		tp, ok2 := strings.CutSuffix(tp, "\n")
		parts := strings.Split(tp, "-")
		if !ok || !ok2 || len(parts) != 4 || parts[0] != "00" || len(parts[1]) != 32 || len(parts[2]) != 16 || parts[3] != "01" {
			t.Fatalf("answer %q is not \"ok <traceparent>\"", answer)
		}
		return parts[1], parts[2]
	}
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	batchLine := fmt.Sprintf("step start %d %d\n", uint32(stepBatch), ms(time.Second))
	bt, bsid := parse(p.handle(batchLine))
	if _, again := parse(p.handle(batchLine)); again != bsid {
		t.Errorf("the same start again: %s, then %s", bsid, again)
	}
	wantSpan := map[string]string{} // step id -> the span id its tasks got
	for i := 0; i < MaxStepSpans+3; i++ {
		tr, sid := parse(p.handle(fmt.Sprintf("step start %d %d\n", i, ms(2*time.Second))))
		if tr != bt || tr != fmt.Sprintf("%x", JobTraceID(f)) {
			t.Fatalf("step %d: trace %s, want the job's %x", i, tr, JobTraceID(f))
		}
		wantSpan[strconv.Itoa(i)] = sid
	}
	for i := 0; i < MaxStepSpans+3; i++ {
		p.handle(fmt.Sprintf("step end %d %d %d 0 0 0 0 1\n", i, ms(2*time.Second), ms(3*time.Second)))
	}
	p.handle(fmt.Sprintf("step end %d %d %d %d 0 0 0 1\n", uint32(stepBatch), ms(time.Second), ms(5*time.Second), ms(4*time.Second)))
	p.end(t0.Add(10 * time.Second))
	spans := p.take()
	bs := byName(spans, vocab.SpanBatchScript)
	if len(bs) != 1 || fmt.Sprintf("%x", bs[0].SpanId) != bsid {
		t.Errorf("the batch step's tasks got span %s, the batch script span is %v", bsid, bs)
	}
	got := map[string]string{}
	for _, s := range byName(spans, vocab.SpanStep) {
		got[attr(s, vocab.AttrStepID).(string)] = fmt.Sprintf("%x", s.SpanId)
	}
	agg := byName(spans, vocab.SpanStepsAggregated)
	if len(agg) != 1 {
		t.Fatalf("%d aggregated spans", len(agg))
	}
	for id, sid := range wantSpan {
		want, ok := got[id]
		if !ok {
			want = fmt.Sprintf("%x", agg[0].SpanId)
		}
		if sid != want {
			t.Errorf("step %s: tasks got span %s, its span is %s", id, sid, want)
		}
	}
	if n := len(got); n != MaxStepSpans+1 {
		t.Errorf("%d step spans, want %d and the batch step's", n, MaxStepSpans)
	}
	if a := p.handle(fmt.Sprintf("step start 999 %d\n", ms(11*time.Second))); a != "ok\n" {
		t.Errorf("a step after the drain: %q, want no context", a)
	}
}

// A job that drains before QueueWaitDelay asks for its queue wait at the
// drain and waits for the answer; one not answered within the bound is
// sent without it, the job's span saying why, and its late answer is
// dropped. The query is asked once, however often the drain and the
// timer ask.
func TestPhasesQueueWaitAtTheDrain(t *testing.T) {
	t0 := time.Unix(1_700_000_100, 0)
	asked := 0
	answer := func(context.Context, string) (time.Time, time.Time, error) {
		asked++
		return time.Unix(1700000000, 0), time.Unix(1700000099, 0), nil
	}
	p := newPhases(jobfacts.Facts{JobID: "9", Node: "n"}, t0, t0)
	p.askQueue(context.Background(), answer)
	p.awaitQueue(p.askQueue(context.Background(), answer), time.Minute)
	p.end(t0.Add(time.Second))
	if q := byName(p.take(), vocab.SpanQueueWait); len(q) != 1 || asked != 1 {
		t.Fatalf("queue wait %v after %d queries: want one span, one query", q, asked)
	}

	release := make(chan struct{})
	late := func(context.Context, string) (time.Time, time.Time, error) {
		<-release
		return time.Unix(1700000000, 0), time.Unix(1700000099, 0), nil
	}
	p = newPhases(jobfacts.Facts{JobID: "9", Node: "n"}, t0, t0)
	done := p.askQueue(context.Background(), late)
	start := time.Now()
	p.awaitQueue(done, 50*time.Millisecond)
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the drain waited %v for an unanswered query (bound 50ms)", waited)
	}
	p.end(t0.Add(time.Second))
	close(release)
	<-done
	spans := p.take()
	if len(byName(spans, vocab.SpanQueueWait)) != 0 {
		t.Error("a late answer made a queue-wait span after the job's span was sent")
	}
	if why, _ := attr(byName(spans, vocab.SpanJob)[0], vocab.AttrQueueUnknown).(string); !strings.Contains(why, "no answer by the drain") {
		t.Errorf("the job's span says %q of an unanswered query", why)
	}
}
