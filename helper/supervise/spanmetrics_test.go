package supervise_test

import (
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// spanCalls is the span metrics' calls and duration counts by span name
// (otlptest.Data.SpanMetrics).
func spanCalls(d otlptest.Data) (calls, hist map[string]float64) { return d.SpanMetrics() }

// assertCallsMatchSpans checks that every span name of traces has its
// span count as calls, and as its duration histogram's count, in metrics.
func assertCallsMatchSpans(t *testing.T, where string, traces, metrics otlptest.Data) {
	t.Helper()
	spans := map[string]int{}
	for _, sp := range traces.Spans {
		spans[sp.Name]++
	}
	calls, hist := spanCalls(metrics)
	var names []string
	for n := range spans {
		names = append(names, n)
	}
	sort.Strings(names)
	var got []string
	for _, n := range names {
		got = append(got, fmt.Sprintf("%s spans %d calls %v n %v", n, spans[n], calls[n], hist[n]))
		if calls[n] != float64(spans[n]) || hist[n] != float64(spans[n]) {
			t.Errorf("%s: %s has %d spans but calls %v and a duration count %v", where, n, spans[n], calls[n], hist[n])
		}
	}
	t.Logf("%s: %s", where, strings.Join(got, "; "))
}

// TestLateSpansCounted: spans of names never seen before that arrive in
// the job's last second, drained right after, and the supervisor's own
// phase spans (the node's root span is sent at the drain itself, the
// drain's span after the collector's exit): in metrics.jsonl and at the
// backend every span name's calls, and its duration count, equal its
// spans in traces.jsonl. The connector starts a new series at 0 and
// carries its count one flush later, and exports nothing at its
// shutdown; the drain does not wait for its flushes (it stops the
// collector at once and appends the continuation of every series the
// spans in traces.jsonl outnumber). Without late spans of the job's own
// ("quiet"), only the phase spans sent at the drain are late; a supervisor
// without phase spans (not started by the plugin's prolog) and without
// late spans ("unplugged") has nothing to append. Files larger than the
// drain reads ("large": the supervisor's threshold lowered to 1 byte, as
// with more than 128 MiB) make the drain wait for the connector's
// flushes instead, and every span is counted still.
func TestLateSpansCounted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                string
		late, record, large bool
	}{{"late", true, true, false}, {"quiet", false, true, false}, {"unplugged", false, false, false}, {"large", true, true, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			lateSpansJob(t, c.late, c.record, c.large)
		})
	}
}

func lateSpansJob(t *testing.T, late, record, large bool) {
	token := "tok-" + harness.RandHex(8)
	be := harness.StartBackend(t, token)
	j := harness.Job{JobID: "8686", Token: token, Endpoint: be.URL}
	if large {
		j.Env = []string{"GYM_OTEL_SPAN_COUNT_MAX_BYTES=1"}
	}
	if record {
		j.Record = filepath.Join(harness.SharedDir(t), "record")
		if err := os.WriteFile(j.Record, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := harness.StartSup(t, j).MustReady(t)
	// An early span, long counted, and the prolog's phase span.
	post(t, s.Report.Ports.OTLPHTTP, "traces", s.ReceiverToken, spansJSON("early.work", 1), http.StatusOK)
	harness.WaitFor(t, 20*time.Second, "the early span's count in metrics.jsonl", func() bool {
		m, err := otlptest.ReadGrowing(filepath.Join(s.Out, "metrics.jsonl"))
		if err != nil {
			return false
		}
		c, _ := spanCalls(m)
		return c["early.work"] == 1 && (!record || c[vocab.SpanProlog] == 1)
	})
	if !record {
		// Past the settle of the early span: nothing is late.
		time.Sleep(s.Policy().SpanMetricsSettle)
	}
	if late {
		// The late ones: new names, in the job's last second.
		post(t, s.Report.Ports.OTLPHTTP, "traces", s.ReceiverToken, spansJSON("late.rollout", 3), http.StatusOK)
		time.Sleep(300 * time.Millisecond)
		post(t, s.Report.Ports.OTLPHTTP, "traces", s.ReceiverToken, spansJSON("late.verify", 2), http.StatusOK)
		time.Sleep(200 * time.Millisecond)
	}
	took, err := s.Drain(t, 30*time.Second)
	if err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	t.Logf("drain took %d ms (the epilog's wait %v)", took.Milliseconds(), s.Policy().DrainWait)
	if took > s.Policy().DrainWait {
		t.Errorf("drain took %v, more than the epilog's wait %v", took, s.Policy().DrainWait)
	}
	// The drain does not wait for the connector's flushes: the span
	// metrics it did not export are counted from the files. Unless the
	// files are too large to read within the drain: then it waits for
	// two flushes after the last spans (the node's root span, sent at
	// the drain's start, among them).
	waited := strings.Contains(s.Output(), "for the span metrics of the last spans")
	switch {
	case !large && (took >= s.Policy().SpanMetricsSettle || waited):
		t.Errorf("drain took %v: it waited for span metrics (settle %v)\n%s", took, s.Policy().SpanMetricsSettle, s.Output())
	case large && (took < s.Policy().SpanMetricsSettle-time.Second || !waited):
		t.Errorf("drain took %v, waited %v: files over the threshold should make it wait about %v for the connector's flushes\n%s", took, waited, s.Policy().SpanMetricsSettle, s.Output())
	}
	tr := otlptest.MustRead(t, s.Out, "traces")
	want := map[string]int{"early.work": 1, vocab.SpanProlog: 1, vocab.SpanJob: 1, vocab.SpanDrain: 1}
	if !record {
		want = map[string]int{"early.work": 1}
	}
	if late {
		want["late.rollout"], want["late.verify"] = 3, 2
	}
	for n, c := range want {
		if tr.SpanCount(n) != c {
			t.Errorf("traces.jsonl: %d %s spans, want %d", tr.SpanCount(n), n, c)
		}
	}
	m := otlptest.MustRead(t, s.Out, "metrics")
	assertCallsMatchSpans(t, "metrics.jsonl", tr, m)
	// inspect shows one calls figure per span name, the raw spans'.
	r, err := inspect.Build(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	shown := map[string]float64{}
	for _, x := range r.Spans.SpanMetrics {
		shown[x.Name] = float64(x.Calls)
		if x.CallsNote != "" {
			t.Errorf("inspect: %s: calls %v with a note %q: the files' span metrics should count every span", x.Name, x.Calls, x.CallsNote)
		}
	}
	for n, c := range want {
		if shown[n] != float64(c) {
			t.Errorf("inspect: %s calls %v, want its %d spans", n, shown[n], c)
		}
	}
	if record {
		assertAppendedShape(t, m)
	}
	be.Stop(t)
	assertCallsMatchSpans(t, "the backend", otlptest.MustRead(t, be.Dir, "traces"), otlptest.MustRead(t, be.Dir, "metrics"))
}

// assertAppendedShape checks that the span metrics the supervisor
// appended for slurm.drain have the shape of the connector's own points of
// slurm.prolog: the same resource, the same point attributes but for
// span.name, the same metric types, unit and histogram bounds.
func assertAppendedShape(t *testing.T, m otlptest.Data) {
	t.Helper()
	type shape struct {
		resource, point map[string]string
		typ, bounds     string
	}
	of := func(span string) map[string]shape {
		out := map[string]shape{}
		for _, mt := range m.Metrics {
			if !strings.HasPrefix(mt.Name, "traces.span.metrics.") {
				continue
			}
			for _, a := range mt.PointAttrs() {
				if n, _ := a.Str("span.name"); n != span {
					continue
				}
				p := a.Text()
				delete(p, "span.name")
				sh := shape{resource: mt.Resource.Text(), point: p, typ: mt.Type()}
				if mt.Histogram != nil {
					sh.bounds = fmt.Sprint(mt.Histogram.DataPoints[0].ExplicitBounds)
				}
				out[mt.Name] = sh
			}
		}
		return out
	}
	conn, ours := of(vocab.SpanProlog), of(vocab.SpanDrain)
	if len(conn) != 2 || len(ours) != 2 {
		t.Fatalf("span metrics of slurm.prolog (the connector's) %v, of slurm.drain (appended) %v: want calls and duration of each", conn, ours)
	}
	if fmt.Sprint(conn) != fmt.Sprint(ours) {
		t.Errorf("the appended span metrics differ in shape from the connector's:\n appended  %v\n connector %v", ours, conn)
	}
}

// spansJSON is an OTLP/HTTP JSON request of n spans named name, each of
// 10 ms ending now.
func spansJSON(name string, n int) string {
	end := time.Now()
	var spans []string
	for i := range n {
		spans = append(spans, fmt.Sprintf(`{"traceId":"%s","spanId":"%s","name":%q,"kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d"}`,
			harness.RandHex(16), harness.RandHex(8), name, end.Add(-10*time.Millisecond).UnixNano()+int64(i), end.UnixNano()+int64(i)))
	}
	return `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"gym-late"}}]},` +
		`"scopeSpans":[{"scope":{"name":"late"},"spans":[` + strings.Join(spans, ",") + `]}]}]}`
}
