package inspect

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of the inspect text")

// quantilesIn calls fn with every Quantiles of v (walking structs, slices
// and maps) and the path to it.
func quantilesIn(v reflect.Value, path string, fn func(string, Quantiles)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			quantilesIn(v.Elem(), path, fn)
		}
	case reflect.Struct:
		if q, ok := v.Interface().(Quantiles); ok {
			fn(path, q)
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				quantilesIn(v.Field(i), path+"."+v.Type().Field(i).Name, fn)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			quantilesIn(v.Index(i), fmt.Sprintf("%s[%d]", path, i), fn)
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			quantilesIn(v.MapIndex(k), fmt.Sprintf("%s[%v]", path, k), fn)
		}
	}
}

// checkFigures fails for a quantile above the max or below the min of its
// distribution, for quantiles next to a one-bucket range, and returns how
// many distributions it checked.
func checkFigures(t *testing.T, r *Report) int {
	t.Helper()
	n := 0
	quantilesIn(reflect.ValueOf(r), "report", func(path string, q Quantiles) {
		if q.Count == 0 {
			return
		}
		n++
		for name, v := range map[string]Value{"p50": q.P50, "p90": q.P90, "p99": q.P99, "mean": q.Mean} {
			if !v.Known() {
				continue
			}
			if q.Max.Known() && v > q.Max+1e-9 {
				t.Errorf("%s: %s %v above max %v", path, name, v, q.Max)
			}
			if q.Min.Known() && v < q.Min-1e-9 {
				t.Errorf("%s: %s %v below min %v", path, name, v, q.Min)
			}
			if q.Within != nil && name != "mean" {
				t.Errorf("%s: %s %v given for a one-bucket histogram %v", path, name, v, q.Within)
			}
		}
		if q.Within != nil && len(q.Within) != 2 {
			t.Errorf("%s: within %v", path, q.Within)
		}
	})
	return n
}

// golden compares got with testdata/<name>, rewriting it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if string(want) != got {
		t.Errorf("text differs from %s (go test -update rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// TestDemoFigures: the files a real collector wrote for the demo's job.
// Every histogram of it fell into one bucket (rollouts of 31 ms in
// (25, 50], verify spans of 10 ms in the span metrics' (5, 10] or (10, 100]):
// the report shows ranges, takes span durations from the raw spans, and
// states the window of the throughput and why the empty sections are empty.
func TestDemoFigures(t *testing.T) {
	r, err := Build("testdata/otel")
	if err != nil {
		t.Fatal(err)
	}
	if n := checkFigures(t, r); n < 5 {
		t.Errorf("only %d distributions checked", n)
	}
	h := r.Gym.RolloutHistogram
	if h.Within == nil || !near(h.Within[0], 30.97) || !near(h.Within[1], 31.307) || h.P50.Known() {
		t.Errorf("rollout histogram %+v: want the range 30.97-31.307 and no quantiles", h)
	}
	for _, m := range r.Spans.SpanMetrics {
		if m.DurationFrom != "spans" || m.Spans != 3 {
			t.Errorf("span metric %s: duration from %q (%d spans), want the 3 raw spans", m.Name, m.DurationFrom, m.Spans)
		}
		if m.Name == "gym.verify" && (m.Duration.P50 < 10 || m.Duration.P50 > 11) {
			t.Errorf("gym.verify p50 %v ms, its spans took 10.3 ms", m.Duration.P50)
		}
	}
	if !near(r.Gym.RolloutsCounted, 3) || !r.Gym.RolloutsWindowSeconds.Known() || r.Gym.RolloutsWindowSeconds > 1 {
		t.Errorf("rollouts %v in %v s", r.Gym.RolloutsCounted, r.Gym.RolloutsWindowSeconds)
	}
	// The rollout rate's first interval: the histogram counts from its
	// series' start time (10:45:47.513), so its first point's 3 rollouts
	// (at 47.609) are a rate of 3 in 0.096 s, as the throughput line's
	// spans say (not a series that starts at its second point with 0).
	rate, over := r.Gym.RolloutRate["n1"], r.Gym.RolloutsOverTime["n1 nemo-gym/agent"]
	if len(rate) == 0 || rate[0][0] != 1795949147609 || math.Abs(rate[0][1]-3/0.096) > 0.5 {
		t.Errorf("rollout rate %v: want 31.2 rollouts/s at 47.609 first (3 since the series' start at 47.513)", rate)
	}
	if len(over) == 0 || over[0][0] != 1795949147513 || over[0][1] != 0 {
		t.Errorf("rollouts over time %v: want 0 at the series' start 47.513 first", over)
	}
	// Files without a collector.yaml (as a backend's): nothing says what
	// was scraped, so a section is not called "not scraped".
	for _, sec := range []string{"model servers", "GPUs", "hosts"} {
		if a := r.absent(sec); a == nil || a.Why != WhyNothing || !strings.Contains(a.Detail, "no collector.yaml to say what was scraped") {
			t.Errorf("%s: absent %+v, want %q without a collector.yaml", sec, a, WhyNothing)
		}
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "demo.golden.txt", b.String())
}

// histLine is one OTLP histogram point of name over bounds 10, 20, 50, 100
// with per-bucket counts c (cumulative temporality), and min/max when
// given.
func histLine(node, name string, sec int, c [5]int, sum float64, minMax string) string {
	n := c[0] + c[1] + c[2] + c[3] + c[4]
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[`+
		`{"name":%q,"histogram":{"dataPoints":[{"timeUnixNano":"%d","count":"%d","sum":%v,`+
		`"bucketCounts":["%d","%d","%d","%d","%d"],"explicitBounds":[10,20,50,100]%s}],"aggregationTemporality":2}}]}]}]}`+"\n",
		res(node, "nemo-gym/agent", ""), name, ns(sec), n, sum, c[0], c[1], c[2], c[3], c[4], minMax)
}

// TestQuantilesClamped: interpolation inside the buckets would put the
// p90 and p99 above the largest rollout (51 ms in (50, 100]: p99 ~ 99) and
// the p50 below the smallest; with the point's min and max they stay
// inside. A Prometheus-style histogram (no min/max) whose observations all
// fell into one bucket is that bucket's range.
func TestQuantilesClamped(t *testing.T) {
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var m strings.Builder
	// A long job: 600 points; 2 rollouts of 19 ms then 1 of 51 ms per point.
	for i := 1; i <= 600; i++ {
		m.WriteString(histLine("gn1", mRolloutMs, i, [5]int{0, 2 * i, 0, i, 0}, float64(i)*(2*19+51), `,"min":19,"max":51`))
		m.WriteString(histLine("gn1", mSpanDuration, i, [5]int{0, 0, 4 * i, 0, 0}, float64(i)*4*30, ``))
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(m.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	checkFigures(t, r)
	h := r.Gym.RolloutHistogram
	if h.Count != 1800 || h.P99 != 51 || h.P90 != 51 || h.Min != 19 || h.Max != 51 || h.Within != nil {
		t.Errorf("rollout histogram %+v: want p90 = p99 = max = 51", h)
	}
	if !h.P50.Known() || h.P50 < 19 || h.P50 > 20 {
		t.Errorf("rollout p50 %v: the 900th of 1200 rollouts in (10, 20] is at most 20", h.P50)
	}
	if len(r.Spans.SpanMetrics) != 1 {
		t.Fatalf("span metrics %+v", r.Spans.SpanMetrics)
	}
	d := r.Spans.SpanMetrics[0]
	if d.DurationFrom != "histogram" || d.Duration.Within == nil || d.Duration.Within[0] != 20 || d.Duration.Within[1] != 50 || d.Duration.P50.Known() {
		t.Errorf("span metric %+v: want the bucket (20, 50] and no quantiles", d)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"all within 20.0-50.0 ms", "p99 51.0  min 19.0  max 51.0", "1800 in ", "(the run's time span)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	if math.IsNaN(float64(r.Gym.RolloutsPerMinute)) {
		t.Error("no rollout throughput")
	}
}

// TestReasonsAndWindows: the two-node job of TestBuild. Its node target was
// configured but never scraped (nothing there); the token rates and the
// rollout throughput carry their windows; vLLM's histograms (no min or
// max) say so.
func TestReasonsAndWindows(t *testing.T) {
	r, err := Build(writeJob(t))
	if err != nil {
		t.Fatal(err)
	}
	checkFigures(t, r)
	if a := r.absent("hosts"); a == nil || a.Why != WhyNothing || a.Detail != "0 scrapes, 0 answered" {
		t.Errorf("hosts absent %+v", a)
	}
	if a := r.absent("GPUs"); a != nil {
		t.Errorf("GPUs absent %+v", a)
	}
	if r.ModelServers[0].RateWindowSeconds != 20 || r.ModelServers[2].RateWindowSeconds != 20 {
		t.Errorf("rate windows %v %v", r.ModelServers[0].RateWindowSeconds, r.ModelServers[2].RateWindowSeconds)
	}
	if !near(r.Gym.RolloutsWindowSeconds, 1.5) || r.Gym.RolloutsCounted != 2 {
		t.Errorf("rollouts %v in %v s", r.Gym.RolloutsCounted, r.Gym.RolloutsWindowSeconds)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"== hosts (node_exporter): nothing there (0 scrapes, 0 answered)",
		"tokens/s over 20 s (first to last scrape): prompt 10.0",
		"2 in 1.50 s (first span's start to last span's end): 80.0 per minute",
		"max - (buckets only)", "3 scrapes, 3 answered",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}
