// Package otlptest reads, for the tests, the OTLP-JSON files the
// collector's file exporter writes (the job's traces.jsonl, metrics.jsonl,
// logs.jsonl, and the test backend's files of the same form: one
// ExportXxxServiceRequest per line) into typed resources, metrics, spans
// and log records. It is the one reader of those files in the tests;
// production code does not import it.
package otlptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Value is one OTLP-JSON AnyValue: its one key (stringValue, intValue,
// doubleValue, boolValue, arrayValue, kvlistValue, bytesValue) and the raw
// JSON of its value.
type Value map[string]json.RawMessage

// Text is the value as text: a string as it is, an intValue's digits, any
// other value as fmt.Sprint of its decoded JSON; "" for an empty value.
func (v Value) Text() string {
	for _, raw := range v {
		var x any
		if json.Unmarshal(raw, &x) != nil {
			return string(raw)
		}
		return fmt.Sprint(x)
	}
	return ""
}

// KV is one attribute.
type KV struct {
	Key   string `json:"key"`
	Value Value  `json:"value"`
}

// Attrs are the attributes of a resource, data point, span or log record,
// in the order of the file.
type Attrs []KV

// Str returns the string value of key; ok is false when key is absent or
// its value is not a stringValue (an intValue slurm_job_id is not ok).
func (a Attrs) Str(key string) (string, bool) {
	for _, kv := range a {
		if kv.Key != key {
			continue
		}
		raw, ok := kv.Value["stringValue"]
		if !ok {
			return "", false
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	}
	return "", false
}

// Has reports whether key is present, whatever its value.
func (a Attrs) Has(key string) bool {
	for _, kv := range a {
		if kv.Key == key {
			return true
		}
	}
	return false
}

// Text returns every attribute with its value as text (Value.Text); an
// attribute with an empty value is left out.
func (a Attrs) Text() map[string]string {
	m := map[string]string{}
	for _, kv := range a {
		if len(kv.Value) > 0 {
			m[kv.Key] = kv.Value.Text()
		}
	}
	return m
}

// Int is an OTLP-JSON 64-bit integer, written as a string ("3") or a
// number; a nanosecond time (timeUnixNano) is exact.
type Int int64

// UnmarshalJSON reads a string or a number; a fraction is truncated.
func (n *Int) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		*n = Int(i)
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	*n = Int(f)
	return err
}

// Float is an OTLP-JSON double: a number, or "NaN", "Infinity" or
// "-Infinity" as protojson writes them.
type Float float64

// UnmarshalJSON reads a number or one of the three strings.
func (f *Float) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"NaN"`:
		*f = Float(math.NaN())
	case `"Infinity"`:
		*f = Float(math.Inf(1))
	case `"-Infinity"`:
		*f = Float(math.Inf(-1))
	default:
		var x float64
		if err := json.Unmarshal(b, &x); err != nil {
			return err
		}
		*f = Float(x)
	}
	return nil
}

// NumberPoint is a data point of a gauge or a sum.
type NumberPoint struct {
	Attributes Attrs  `json:"attributes"`
	Start      Int    `json:"startTimeUnixNano"`
	Time       Int    `json:"timeUnixNano"`
	Flags      int    `json:"flags"`
	AsInt      *Int   `json:"asInt"`
	AsDouble   *Float `json:"asDouble"`
}

// Value is asInt or asDouble; 0 when the point has neither (a staleness
// marker, flags 1).
func (p NumberPoint) Value() float64 {
	if p.AsInt != nil {
		return float64(*p.AsInt)
	}
	if p.AsDouble != nil {
		return float64(*p.AsDouble)
	}
	return 0
}

// At is the point's time (timeUnixNano).
func (p NumberPoint) At() time.Time { return time.Unix(0, int64(p.Time)) }

// HistogramPoint is a data point of an explicit-bucket histogram.
type HistogramPoint struct {
	Attributes     Attrs     `json:"attributes"`
	Start          Int       `json:"startTimeUnixNano"`
	Time           Int       `json:"timeUnixNano"`
	Flags          int       `json:"flags"`
	Count          Int       `json:"count"`
	Sum            float64   `json:"sum"`
	BucketCounts   []Int     `json:"bucketCounts"`
	ExplicitBounds []float64 `json:"explicitBounds"`
}

// BasePoint is a data point of an exponential histogram or a summary, as
// far as the tests read it.
type BasePoint struct {
	Attributes Attrs `json:"attributes"`
	Flags      int   `json:"flags"`
}

// Metric is one metric with the attributes of its resource. Exactly one
// of Gauge, Sum, Histogram, ExponentialHistogram and Summary is set.
type Metric struct {
	Resource Attrs  `json:"-"`
	Name     string `json:"name"`
	Gauge    *struct {
		DataPoints []NumberPoint `json:"dataPoints"`
	} `json:"gauge"`
	Sum *struct {
		DataPoints             []NumberPoint `json:"dataPoints"`
		AggregationTemporality int           `json:"aggregationTemporality"`
		IsMonotonic            bool          `json:"isMonotonic"`
	} `json:"sum"`
	Histogram *struct {
		DataPoints             []HistogramPoint `json:"dataPoints"`
		AggregationTemporality int              `json:"aggregationTemporality"`
	} `json:"histogram"`
	ExponentialHistogram *struct {
		DataPoints []BasePoint `json:"dataPoints"`
	} `json:"exponentialHistogram"`
	Summary *struct {
		DataPoints []BasePoint `json:"dataPoints"`
	} `json:"summary"`
}

// Type is the metric's data type: gauge, sum, histogram,
// exponentialHistogram or summary; "" when it has none.
func (m Metric) Type() string {
	switch {
	case m.Gauge != nil:
		return "gauge"
	case m.Sum != nil:
		return "sum"
	case m.Histogram != nil:
		return "histogram"
	case m.ExponentialHistogram != nil:
		return "exponentialHistogram"
	case m.Summary != nil:
		return "summary"
	}
	return ""
}

// PointAttrs returns the attributes of each of the metric's data points.
func (m Metric) PointAttrs() []Attrs {
	var out []Attrs
	switch {
	case m.Gauge != nil:
		for _, p := range m.Gauge.DataPoints {
			out = append(out, p.Attributes)
		}
	case m.Sum != nil:
		for _, p := range m.Sum.DataPoints {
			out = append(out, p.Attributes)
		}
	case m.Histogram != nil:
		for _, p := range m.Histogram.DataPoints {
			out = append(out, p.Attributes)
		}
	case m.ExponentialHistogram != nil:
		for _, p := range m.ExponentialHistogram.DataPoints {
			out = append(out, p.Attributes)
		}
	case m.Summary != nil:
		for _, p := range m.Summary.DataPoints {
			out = append(out, p.Attributes)
		}
	}
	return out
}

// Points counts the metric's data points, of whatever type: what the
// collector counts as metric points.
func (m Metric) Points() int { return len(m.PointAttrs()) }

// Span is one span with the attributes of its resource. The ids are hex
// as the files write them; ParentSpanID is "" for a root span.
type Span struct {
	Resource     Attrs  `json:"-"`
	Name         string `json:"name"`
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Attributes   Attrs  `json:"attributes"`
	Links        []Link `json:"links"`
}

// Link is one of a span's links to another span (hex ids).
type Link struct {
	TraceID    string `json:"traceId"`
	SpanID     string `json:"spanId"`
	Attributes Attrs  `json:"attributes"`
}

// Log is one log record with the attributes of its resource.
type Log struct {
	Resource   Attrs  `json:"-"`
	Body       Value  `json:"body"`
	TraceID    string `json:"traceId"`
	Attributes Attrs  `json:"attributes"`
}

// resource is a resource's attributes, as the files write them.
type resource struct {
	Attributes Attrs `json:"attributes"`
}

// The scopes of the three signals, each with the list of its items.
type (
	scopeMetrics struct {
		Metrics []Metric `json:"metrics"`
	}
	scopeSpans struct {
		Spans []Span `json:"spans"`
	}
	scopeLogs struct {
		LogRecords []Log `json:"logRecords"`
	}
)

func (s scopeMetrics) list() []Metric { return s.Metrics }
func (s scopeSpans) list() []Span     { return s.Spans }
func (s scopeLogs) list() []Log       { return s.LogRecords }

// line is one line of any of the three files.
type line struct {
	ResourceMetrics []struct {
		Resource     resource       `json:"resource"`
		ScopeMetrics []scopeMetrics `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
	ResourceSpans []struct {
		Resource   resource     `json:"resource"`
		ScopeSpans []scopeSpans `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceLogs []struct {
		Resource  resource    `json:"resource"`
		ScopeLogs []scopeLogs `json:"scopeLogs"`
	} `json:"resourceLogs"`
}

// Data is everything read from one file (or several, Add): the lines read
// and, in file order, every resource, metric, span and log record.
type Data struct {
	Lines     int
	Resources []Attrs
	Metrics   []Metric
	Spans     []Span
	Logs      []Log
}

// The items of the three signals, each given its resource's attributes.
func (m Metric) of(r Attrs) Metric { m.Resource = r; return m }
func (s Span) of(r Attrs) Span     { s.Resource = r; return s }
func (g Log) of(r Attrs) Log       { g.Resource = r; return g }

// flatten appends every item of every scope, given the attributes r of
// their resource, to out.
func flatten[S interface{ list() []I }, I interface{ of(Attrs) I }](out []I, r Attrs, scopes []S) []I {
	for _, s := range scopes {
		for _, it := range s.list() {
			out = append(out, it.of(r))
		}
	}
	return out
}

// add appends one parsed line.
func (d *Data) add(l *line) {
	d.Lines++
	for _, x := range l.ResourceMetrics {
		d.Resources = append(d.Resources, x.Resource.Attributes)
		d.Metrics = flatten(d.Metrics, x.Resource.Attributes, x.ScopeMetrics)
	}
	for _, x := range l.ResourceSpans {
		d.Resources = append(d.Resources, x.Resource.Attributes)
		d.Spans = flatten(d.Spans, x.Resource.Attributes, x.ScopeSpans)
	}
	for _, x := range l.ResourceLogs {
		d.Resources = append(d.Resources, x.Resource.Attributes)
		d.Logs = flatten(d.Logs, x.Resource.Attributes, x.ScopeLogs)
	}
}

// Read reads every line of path, the file of a collector that has
// stopped: a line that is not one complete OTLP-JSON object, an empty
// line and an unterminated last line are errors naming path and the line.
// A missing file is empty.
func Read(path string) (Data, error) {
	var d Data
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	if len(data) == 0 {
		return d, nil
	}
	if data[len(data)-1] != '\n' {
		return d, fmt.Errorf("%s: the last line is not terminated (partial write)", path)
	}
	for i, raw := range bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")) {
		if len(raw) == 0 {
			return d, fmt.Errorf("%s:%d: empty line", path, i+1)
		}
		var l line
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&l); err != nil {
			return d, fmt.Errorf("%s:%d: %v (%.80q)", path, i+1, err, raw)
		}
		if dec.More() {
			return d, fmt.Errorf("%s:%d: trailing data after the JSON object", path, i+1)
		}
		d.add(&l)
	}
	return d, nil
}

// Parse reads one OTLP-JSON export request (a line of a file, or the
// body of an OTLP/HTTP JSON request); an error when it is not one.
func Parse(b []byte) (Data, error) {
	var d Data
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return d, err
	}
	d.add(&l)
	return d, nil
}

// ReadGrowing reads the lines of path that parse, the file of a collector
// still writing it: a line that does not parse (the last one, being
// written) is skipped. A missing file is empty.
func ReadGrowing(path string) (Data, error) {
	var d Data
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	for _, raw := range bytes.Split(data, []byte("\n")) {
		var l line
		if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &l) != nil {
			continue
		}
		d.add(&l)
	}
	return d, nil
}

// Named returns the metrics called name, in file order.
func (d Data) Named(name string) []Metric {
	var out []Metric
	for _, m := range d.Metrics {
		if m.Name == name {
			out = append(out, m)
		}
	}
	return out
}

// SpanCount counts the spans called name.
func (d Data) SpanCount(name string) int {
	n := 0
	for _, s := range d.Spans {
		if s.Name == name {
			n++
		}
	}
	return n
}

// Points counts the data points of every metric (Metric.Points).
func (d Data) Points() int {
	n := 0
	for _, m := range d.Metrics {
		n += m.Points()
	}
	return n
}

// MustRead reads dir/<signal>.jsonl (signal: traces, metrics or logs)
// with Read or fails the test.
func MustRead(t testing.TB, dir, signal string) Data {
	t.Helper()
	d, err := Read(filepath.Join(dir, signal+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// SpanMetrics sums the span_metrics connector's figures by span name:
// calls is the traces.span.metrics.calls of each series (its largest
// value: the points are cumulative) summed over the series of a name (its
// span kinds and status codes, resources, and start times: each collector
// run's connector counts from its own start); counts the same of the
// traces.span.metrics.duration histogram's count.
func (d Data) SpanMetrics() (calls, counts map[string]float64) {
	type series struct{ name, key string }
	c, n := map[series]float64{}, map[series]float64{}
	key := func(r, a Attrs, start Int) (series, bool) {
		name, ok := a.Str("span.name")
		return series{name, fmt.Sprint(r.Text(), a.Text(), start)}, ok
	}
	for _, m := range d.Named("traces.span.metrics.calls") {
		if m.Sum == nil {
			continue
		}
		for _, dp := range m.Sum.DataPoints {
			if k, ok := key(m.Resource, dp.Attributes, dp.Start); ok {
				c[k] = max(c[k], dp.Value())
			}
		}
	}
	for _, m := range d.Named("traces.span.metrics.duration") {
		if m.Histogram == nil {
			continue
		}
		for _, dp := range m.Histogram.DataPoints {
			if k, ok := key(m.Resource, dp.Attributes, dp.Start); ok {
				n[k] = max(n[k], float64(dp.Count))
			}
		}
	}
	calls, counts = map[string]float64{}, map[string]float64{}
	for k, v := range c {
		calls[k.name] += v
	}
	for k, v := range n {
		counts[k.name] += v
	}
	return calls, counts
}
