package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// connLine is a line of the connector's: resource service.name gym and
// run, one point of calls and duration (a 10 ms bucket) of span name.
func connLine(run, name string, start, at int64, calls int) string {
	b := make([]string, len(spanMetricsBounds)+1)
	for i := range b {
		b[i] = `"0"`
	}
	b[4] = fmt.Sprintf(`"%d"`, calls) // (8, 10]
	attrs := fmt.Sprintf(`[{"key":"service.name","value":{"stringValue":"gym"}},{"key":"span.name","value":{"stringValue":%q}},`+
		`{"key":"span.kind","value":{"stringValue":"SPAN_KIND_INTERNAL"}},{"key":"status.code","value":{"stringValue":"STATUS_CODE_UNSET"}}]`, name)
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"gym"}},{"key":"run","value":{"stringValue":%q}}]},`+
		`"scopeMetrics":[{"scope":{"name":"spanmetricsconnector"},"metrics":[`+
		`{"name":"traces.span.metrics.calls","sum":{"dataPoints":[{"attributes":%s,"startTimeUnixNano":"%d","timeUnixNano":"%d","asInt":"%d"}],"aggregationTemporality":2,"isMonotonic":true}},`+
		`{"name":"traces.span.metrics.duration","unit":"ms","histogram":{"dataPoints":[{"attributes":%s,"startTimeUnixNano":"%d","timeUnixNano":"%d","count":"%d","sum":%d,"bucketCounts":[%s],"explicitBounds":[2,4,6,8,10,50,100,200,400,800,1000,1400,2000,5000,10000,15000]}],"aggregationTemporality":2}}]}]}]}`+"\n",
		run, attrs, start, at, calls, attrs, start, at, calls, 10*calls, strings.Join(b, ","))
}

// spanLine is a traces.jsonl line of spans (id, name, duration ms, span
// attributes JSON or "") under a resource (its attributes JSON).
func spanLine(resource string, spans ...[4]string) string {
	var out []string
	for _, s := range spans {
		var ms int64
		fmt.Sscan(s[2], &ms)
		end := int64(1_700_000_100_000_000_000)
		a := ""
		if s[3] != "" {
			a = `,"attributes":` + s[3]
		}
		out = append(out, fmt.Sprintf(`{"traceId":"0102","spanId":%q,"name":%q,"kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d"%s}`, s[0], s[1], end-ms*1e6, end, a))
	}
	return `{"resourceSpans":[{"resource":{"attributes":` + resource + `},"scopeSpans":[{"scope":{"name":"x"},"spans":[` + strings.Join(out, ",") + `]}]}]}` + "\n"
}

// spanContinuation carries on each series the spans in traces.jsonl
// outnumber: on the connector's latest point (resource, attributes, start
// time) the calls and the histogram raised by the spans no point counted,
// summed over every resource and start time of the series (each collector
// run's); a span in the file twice (same trace and span id) counts once;
// a series fully counted gets nothing; one the connector never exported is
// new, with the span's dimension and resource (without the source mark);
// spans without service.name are left out, as the connector leaves them.
func TestSpanContinuation(t *testing.T) {
	dir := t.TempDir()
	const s1, s2 = 1_700_000_000_000_000_000, 1_700_000_050_000_000_000
	metrics := connLine("1", "a", s1, s1+2e9, 1) + // run 1: a counted once
		`{"resourceMetrics":[{"resource":{"attributes":[]},"scopeMetrics":[{"scope":{"name":"prometheus"},"metrics":[]}]}]}` + "\n" +
		connLine("2", "a", s2, s2+2e9, 0) + connLine("2", "a", s2, s2+4e9, 2) + connLine("2", "b", s2, s2+4e9, 1)
	gym := `[{"key":"service.name","value":{"stringValue":"gym"}},{"key":"gym_otel.source","value":{"stringValue":"slurm"}}]`
	traces := spanLine(gym, [4]string{"01", "a", "10", ""}, [4]string{"02", "a", "10", ""}, [4]string{"03", "a", "10", ""}, [4]string{"b1", "b", "10", ""}) +
		spanLine(gym, [4]string{"04", "a", "100", ""}, [4]string{"05", "a", "3000", ""}, [4]string{"04", "a", "100", ""},
			[4]string{"c1", "c", "1", `[{"key":"service.name.override","value":{"stringValue":"over"}}]`}, [4]string{"c2", "c", "1", `[{"key":"service.name.override","value":{"stringValue":"over"}}]`}) +
		spanLine(`[{"key":"host.name","value":{"stringValue":"n1"}}]`, [4]string{"d1", "d", "1", ""}) +
		`{"resourceSpans":[` + "\n" // a partial last line
	tp, mp := filepath.Join(dir, "traces.jsonl"), filepath.Join(dir, "metrics.jsonl")
	if err := os.WriteFile(tp, []byte(traces), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mp, []byte(metrics), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, s2+150e9) // after every span's end
	line, series, err := spanContinuation(tp, mp, now)
	if err != nil || series != 2 {
		t.Fatalf("%d series (want a and c), %v: %s", series, err, line)
	}
	if err := os.WriteFile(filepath.Join(dir, "cont.jsonl"), line, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := otlptest.Read(filepath.Join(dir, "cont.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		res, attrs           string
		start, at            int64
		calls, count, sum    float64
		b10, b100, b5000, n2 uint64
	}
	pts := map[string]*got{}
	for _, m := range c.Named(SpanMetricsCalls) {
		for _, dp := range m.Sum.DataPoints {
			n, _ := dp.Attributes.Str("span.name")
			pts[n] = &got{res: fmt.Sprint(m.Resource.Text()), attrs: fmt.Sprint(dp.Attributes.Text()), start: int64(dp.Start), at: int64(dp.Time), calls: dp.Value()}
		}
	}
	for _, m := range c.Named(SpanMetricsDuration) {
		for _, dp := range m.Histogram.DataPoints {
			n, _ := dp.Attributes.Str("span.name")
			if g := pts[n]; g != nil {
				g.count, g.sum = float64(dp.Count), dp.Sum
				g.b10, g.b100, g.b5000, g.n2 = uint64(dp.BucketCounts[4]), uint64(dp.BucketCounts[6]), uint64(dp.BucketCounts[13]), uint64(dp.BucketCounts[0])
			}
		}
	}
	a, cs := pts["a"], pts["c"]
	if a == nil || cs == nil || len(pts) != 2 {
		t.Fatalf("points %v: want a and c only", pts)
	}
	// a: 5 spans (04 twice), 3 counted (1 in run 1, 2 in run 2): run 2's
	// series goes on at 2+2, its histogram with the 100 and 3000 ms spans.
	if a.res != "map[run:2 service.name:gym]" || a.start != s2 || a.at != now.UnixNano() || a.calls != 4 || a.count != 4 ||
		a.sum != 20+100+3000 || a.b10 != 2 || a.b100 != 1 || a.b5000 != 1 {
		t.Errorf("a's continuation %+v", *a)
	}
	if cs.res != "map[service.name:gym]" || cs.calls != 2 || cs.count != 2 || cs.n2 != 2 || cs.start != 1_700_000_100_000_000_000 ||
		!strings.Contains(cs.attrs, "service.name.override:over") || !strings.Contains(cs.attrs, "span.kind:SPAN_KIND_INTERNAL") {
		t.Errorf("c's new series %+v", *cs)
	}
	// A reader of both files counts every span once.
	all := filepath.Join(dir, "all.jsonl")
	if err := os.WriteFile(all, append([]byte(metrics), line...), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := otlptest.Read(all)
	if err != nil {
		t.Fatal(err)
	}
	calls, counts := d.SpanMetrics()
	if calls["a"] != 5 || counts["a"] != 5 || calls["b"] != 1 || calls["c"] != 2 || counts["c"] != 2 || calls["d"] != 0 {
		t.Errorf("a reader counts calls %v, durations %v; want a 5, b 1, c 2", calls, counts)
	}
	// Counted: nothing to append.
	if err := os.WriteFile(mp, append([]byte(metrics), line...), 0o600); err != nil {
		t.Fatal(err)
	}
	if line, series, err := spanContinuation(tp, mp, now); line != nil || series != 0 || err != nil {
		t.Errorf("counted files gave %d series, %v: %s", series, err, line)
	}
}

// BenchmarkSpanContinuation reads a traces.jsonl of 200,000 spans (batches
// of 500 in 40 series, as Gym's agents write them) and a metrics.jsonl
// with their series counted: its MB/s is the read's rate at the drain.
func BenchmarkSpanContinuation(b *testing.B) {
	dir := b.TempDir()
	tp, mp := filepath.Join(dir, "traces.jsonl"), filepath.Join(dir, "metrics.jsonl")
	res := `[{"key":"service.name","value":{"stringValue":"nemo-gym/agent"}},{"key":"host.name","value":{"stringValue":"node-0001"}},` +
		`{"key":"slurm_job_id","value":{"stringValue":"123456"}},{"key":"nv.dl.job.uuid","value":{"stringValue":"0f0e0d0c-0b0a-0908-0706-050403020100"}}]`
	f, err := os.Create(tp)
	if err != nil {
		b.Fatal(err)
	}
	var m strings.Builder
	for i := range 400 {
		var spans []string
		for j := range 500 {
			name := fmt.Sprintf("gym.rollout.step%d", (i*500+j)%40)
			spans = append(spans, fmt.Sprintf(`{"traceId":"%032x","spanId":"%016x","parentSpanId":"%016x","name":%q,"kind":1,`+
				`"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000%09d","attributes":[{"key":"gym.env","value":{"stringValue":"math"}},`+
				`{"key":"gym.reward","value":{"doubleValue":0.5}},{"key":"gym.tokens","value":{"intValue":"812"}}],"status":{}}`, i, j+1, i, name, j*1000))
		}
		fmt.Fprintf(f, `{"resourceSpans":[{"resource":{"attributes":%s},"scopeSpans":[{"scope":{"name":"gym"},"spans":[%s]}]}]}`+"\n", res, strings.Join(spans, ","))
	}
	f.Close()
	for k := range 40 {
		m.WriteString(connLine("1", fmt.Sprintf("gym.rollout.step%d", k), 1, 2, 5000))
	}
	if err := os.WriteFile(mp, []byte(m.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(tp)
	b.SetBytes(fi.Size())
	b.ResetTimer()
	for range b.N {
		if _, _, err := spanContinuation(tp, mp, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}
