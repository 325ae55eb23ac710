package otlptest

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	metricsLine = `{"resourceMetrics":[{"resource":{"attributes":[{"key":"slurm_job_id","value":{"stringValue":"7"}},{"key":"host.name","value":{"stringValue":"gn1"}},{"key":"n","value":{"intValue":"3"}}]},"scopeMetrics":[{"metrics":[` +
		`{"name":"c","sum":{"isMonotonic":true,"dataPoints":[{"timeUnixNano":"1764633600123456789","asInt":"5","attributes":[{"key":"k","value":{"stringValue":"v"}}]},{"timeUnixNano":"1764633601123456789","asDouble":"NaN"}]}},` +
		`{"name":"h","histogram":{"dataPoints":[{"count":"4","bucketCounts":["1","3"],"explicitBounds":[0.5]}]}},` +
		`{"name":"e","exponentialHistogram":{"dataPoints":[{},{}]}},{"name":"s","summary":{"dataPoints":[{}]}}]}]}]}`
	spansLine = `{"resourceSpans":[{"resource":{"attributes":[{"key":"slurm_job_id","value":{"intValue":"7"}}]},"scopeSpans":[{"spans":[{"name":"a","traceId":"t1"},{"name":"a"},{"name":"b"}]}]}]}`
	logsLine  = `{"resourceLogs":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"gn2"}}]},"scopeLogs":[{"logRecords":[{"body":{"stringValue":"hi"},"traceId":"t2"}]},{"logRecords":[{"body":{"intValue":"4"}}]}]}]}`
)

func write(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRead: the typed model of metric, span and log lines: resources,
// every point type, exact nanosecond times, NaN, string and int
// attributes, records of several scopes.
func TestRead(t *testing.T) {
	d, err := Read(write(t, "m.jsonl", metricsLine+"\n"+spansLine+"\n"+logsLine+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Lines != 3 || len(d.Resources) != 3 || len(d.Metrics) != 4 || len(d.Spans) != 3 || len(d.Logs) != 2 {
		t.Fatalf("lines %d, resources %d, metrics %d, spans %d, logs %d; want 3, 3, 4, 3, 2", d.Lines, len(d.Resources), len(d.Metrics), len(d.Spans), len(d.Logs))
	}
	if h, _ := d.Logs[1].Resource.Str("host.name"); h != "gn2" || d.Logs[0].Body.Text() != "hi" || d.Logs[0].TraceID != "t2" || d.Logs[1].Body.Text() != "4" {
		t.Errorf("logs %+v", d.Logs)
	}
	if got := d.Points(); got != 6 {
		t.Errorf("points %d, want 6 (2 sum, 1 histogram, 2 exponential, 1 summary)", got)
	}
	c := d.Named("c")[0]
	if c.Type() != "sum" || !c.Sum.IsMonotonic || c.Sum.DataPoints[0].Value() != 5 || !math.IsNaN(c.Sum.DataPoints[1].Value()) {
		t.Errorf("sum c: %+v", c.Sum)
	}
	if ns := c.Sum.DataPoints[0].At().UnixNano(); ns != 1764633600123456789 {
		t.Errorf("time %d, want 1764633600123456789 (exact)", ns)
	}
	if job, ok := c.Resource.Str("slurm_job_id"); !ok || job != "7" || c.Resource.Text()["n"] != "3" || c.Resource.Has("x") {
		t.Errorf("resource %v", c.Resource.Text())
	}
	if h := d.Named("h")[0].Histogram.DataPoints[0]; h.Count != 4 || len(h.BucketCounts) != 2 || h.BucketCounts[1] != 3 {
		t.Errorf("histogram %+v", h)
	}
	if _, ok := d.Spans[0].Resource.Str("slurm_job_id"); ok || d.Spans[0].Resource.Text()["slurm_job_id"] != "7" {
		t.Errorf("an intValue is not a string but is text 7: %v", d.Spans[0].Resource.Text())
	}
	if d.SpanCount("a") != 2 || d.Spans[0].TraceID != "t1" {
		t.Errorf("spans %+v", d.Spans)
	}
	ps, err := SumPoints(write(t, "s.jsonl", metricsLine+"\n"), "c")
	if p, ok := Latest(ps, "gn1", "7"); err != nil || !ok || len(ps) != 2 || p.At.UnixNano() != 1764633601123456789 {
		t.Errorf("SumPoints: %v %v, latest %+v", err, ps, p)
	}
}

// TestReadStrictAndGrowing: Read names the file and line of a partial or
// broken line; ReadGrowing skips them; a missing file is empty for both.
func TestReadStrictAndGrowing(t *testing.T) {
	for data, want := range map[string]string{
		spansLine + "\n" + spansLine[:40]:               "the last line is not terminated",
		spansLine + "\n\n" + spansLine + "\n":           ":2: empty line",
		spansLine + "\n" + spansLine + spansLine + "\n": ":2: trailing data",
		"{\n": ":1: ",
	} {
		p := write(t, "x.jsonl", data)
		if _, err := Read(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), want) {
			t.Errorf("Read(%.30q...): %v, want an error naming %s and %q", data, err, p, want)
		}
	}
	d, err := ReadGrowing(write(t, "g.jsonl", spansLine+"\n{broken\n\n"+spansLine[:40]))
	if err != nil || d.Lines != 1 || len(d.Spans) != 3 {
		t.Errorf("ReadGrowing: %v, %d lines, %d spans; want 1 line, 3 spans", err, d.Lines, len(d.Spans))
	}
	for _, read := range []func(string) (Data, error){Read, ReadGrowing} {
		if d, err := read(filepath.Join(t.TempDir(), "none.jsonl")); err != nil || d.Lines != 0 {
			t.Errorf("missing file: %v, %d lines", err, d.Lines)
		}
	}
}
