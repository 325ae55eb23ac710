package supervise

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// SpanMetricsLine counts spans as the connector does: one series per
// (span name, kind, status code), calls and a duration histogram in ms
// whose bucket i holds the durations d with bounds[i-1] < d <= bounds[i],
// with the resource's service.name and service.name.override as
// dimensions; bad input is refused.
func TestSpanMetricsLine(t *testing.T) {
	f := jobfacts.Facts{JobID: "42", Node: "n1", Cluster: "c", RestartCount: "2", User: "alice"}
	res := &config.Resolved{}
	res.Otel.ServiceName = "gym"
	id := render.Identity(render.Input{Resolved: res, Job: render.JobOf(res, f)}, "slurm")
	p := newPhases(f, time.Now(), time.Now())
	t0 := time.Unix(1_700_000_000, 0)
	ok := p.span(vocab.SpanDrain, p.spanID("a"), p.root, t0, t0.Add(10*time.Millisecond))    // bucket 4 (8 < 10 <= 10)
	ok2 := p.span(vocab.SpanDrain, p.spanID("b"), p.root, t0, t0.Add(10*time.Millisecond+1)) // bucket 5 (10 < d <= 50)
	failed := p.span(vocab.SpanDrain, p.spanID("c"), p.root, t0, t0.Add(20*time.Second))     // the last bucket (> 15000)
	failed.Status = errStatus("killed")
	epilog := p.span(vocab.SpanEpilog, p.spanID("d"), p.root, t0, t0.Add(-time.Second)) // end before start: 0 ms
	line, err := SpanMetricsLine(id, []*tracev1.Span{ok, ok2, failed, epilog}, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(line), "\n") != 1 || !strings.HasSuffix(string(line), "\n") {
		t.Fatalf("not one line: %q", line)
	}
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	if err := os.WriteFile(path, line, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := otlptest.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	calls, dur := d.Named(SpanMetricsCalls), d.Named(SpanMetricsDuration)
	if len(calls) != 1 || calls[0].Sum == nil || !calls[0].Sum.IsMonotonic || calls[0].Sum.AggregationTemporality != 2 ||
		len(dur) != 1 || dur[0].Histogram == nil || dur[0].Histogram.AggregationTemporality != 2 {
		t.Fatalf("calls %+v, duration %+v: want one cumulative monotonic sum and one cumulative histogram", calls, dur)
	}
	if o, _ := calls[0].Resource.Str("service.name.override"); o != "slurm" || calls[0].Resource.Has("gym_otel.source") {
		t.Errorf("resource %v", calls[0].Resource.Text())
	}
	type key struct{ name, status string }
	got := map[key]string{}
	for _, dp := range calls[0].Sum.DataPoints {
		a := dp.Attributes.Text()
		if a["service.name"] != "gym" || a["service.name.override"] != "slurm" || a["span.kind"] != "SPAN_KIND_INTERNAL" {
			t.Errorf("point attributes %v", a)
		}
		got[key{a["span.name"], a["status.code"]}] += "calls=" + string(rune('0'+int(dp.Value())))
	}
	for _, dp := range dur[0].Histogram.DataPoints {
		a := dp.Attributes.Text()
		var b []string
		for _, n := range dp.BucketCounts {
			b = append(b, string(rune('0'+int(n))))
		}
		got[key{a["span.name"], a["status.code"]}] += " n=" + string(rune('0'+int(dp.Count))) + " b=" + strings.Join(b, "")
		if len(dp.ExplicitBounds) != 16 || dp.ExplicitBounds[15] != 15000 {
			t.Errorf("bounds %v", dp.ExplicitBounds)
		}
	}
	want := map[key]string{
		{vocab.SpanDrain, "STATUS_CODE_UNSET"}:  "calls=2 n=2 b=00001100000000000",
		{vocab.SpanDrain, "STATUS_CODE_ERROR"}:  "calls=1 n=1 b=00000000000000001",
		{vocab.SpanEpilog, "STATUS_CODE_UNSET"}: "calls=1 n=1 b=10000000000000000",
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%v: %q, want %q", k, got[k], w)
		}
	}
	if _, err := SpanMetricsLine(id, nil, t0); err == nil {
		t.Error("no spans: no error")
	}
	if _, err := SpanMetricsLine([]render.Attr{{Key: "slurm_job_restart_count", Value: "x", Int: true}}, []*tracev1.Span{ok}, t0); err == nil ||
		!strings.Contains(err.Error(), "slurm_job_restart_count") {
		t.Errorf("a bad Int: %v", err)
	}
}
