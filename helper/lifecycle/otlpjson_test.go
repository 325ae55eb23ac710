package lifecycle_test

// Parsing of the OTLP-JSON lines the file exporters write (one
// ExportXxxServiceRequest per line), enough for the assertions.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

type otlpKV struct {
	Key   string                     `json:"key"`
	Value map[string]json.RawMessage `json:"value"`
}

type attrs []otlpKV

// str returns the string value of key; ok is false when absent or not a
// stringValue (an intValue slurm_job_id is not ok).
func (a attrs) str(key string) (string, bool) {
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

func (a attrs) has(key string) bool {
	for _, kv := range a {
		if kv.Key == key {
			return true
		}
	}
	return false
}

type otlpResource struct {
	Attributes attrs `json:"attributes"`
}

// jnum is an OTLP-JSON integer: a string ("3") or a number.
type jnum float64

func (n *jnum) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	f, err := strconv.ParseFloat(s, 64)
	*n = jnum(f)
	return err
}

type numberDP struct {
	Attributes attrs    `json:"attributes"`
	Time       jnum     `json:"timeUnixNano"`
	Flags      int      `json:"flags"`
	AsInt      *jnum    `json:"asInt"`
	AsDouble   *float64 `json:"asDouble"`
}

func (d numberDP) value() float64 {
	if d.AsInt != nil {
		return float64(*d.AsInt)
	}
	if d.AsDouble != nil {
		return *d.AsDouble
	}
	return 0
}

type histDP struct {
	Attributes     attrs     `json:"attributes"`
	Flags          int       `json:"flags"`
	Count          jnum      `json:"count"`
	BucketCounts   []jnum    `json:"bucketCounts"`
	ExplicitBounds []float64 `json:"explicitBounds"`
}

type otlpMetric struct {
	Name  string `json:"name"`
	Gauge *struct {
		DataPoints []numberDP `json:"dataPoints"`
	} `json:"gauge"`
	Sum *struct {
		DataPoints             []numberDP `json:"dataPoints"`
		AggregationTemporality int        `json:"aggregationTemporality"`
		IsMonotonic            bool       `json:"isMonotonic"`
	} `json:"sum"`
	Histogram *struct {
		DataPoints             []histDP `json:"dataPoints"`
		AggregationTemporality int      `json:"aggregationTemporality"`
	} `json:"histogram"`
	Summary json.RawMessage `json:"summary"`
}

type otlpSpan struct {
	Name       string `json:"name"`
	TraceID    string `json:"traceId"`
	Attributes attrs  `json:"attributes"`
}

type otlpLog struct {
	Body    map[string]json.RawMessage `json:"body"`
	TraceID string                     `json:"traceId"`
}

// otlpLine is one line of any of the three files.
type otlpLine struct {
	ResourceMetrics []struct {
		Resource     otlpResource `json:"resource"`
		ScopeMetrics []struct {
			Metrics []otlpMetric `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
	ResourceSpans []struct {
		Resource   otlpResource `json:"resource"`
		ScopeSpans []struct {
			Spans []otlpSpan `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceLogs []struct {
		Resource  otlpResource `json:"resource"`
		ScopeLogs []struct {
			LogRecords []otlpLog `json:"logRecords"`
		} `json:"scopeLogs"`
	} `json:"resourceLogs"`
}

// signalData is everything parsed from one jsonl file (or a set of them).
type signalData struct {
	lines     int
	resources []attrs
	metrics   []metricAt // in file order
	spans     []spanAt
	logs      []otlpLog
}

type metricAt struct {
	resource attrs
	otlpMetric
}

type spanAt struct {
	resource attrs
	otlpSpan
}

// parseJSONL parses every line of path; a line that is not a complete
// OTLP-JSON object is an error naming the line. A missing file is empty.
func parseJSONL(path string) (signalData, error) {
	var d signalData
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		return d, fmt.Errorf("%s: the last line is not terminated (partial write)", path)
	}
	for i, line := range bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n")) {
		if len(line) == 0 {
			if len(data) == 0 {
				break
			}
			return d, fmt.Errorf("%s:%d: empty line", path, i+1)
		}
		var l otlpLine
		dec := json.NewDecoder(bytes.NewReader(line))
		if err := dec.Decode(&l); err != nil {
			return d, fmt.Errorf("%s:%d: %v (%.80q)", path, i+1, err, line)
		}
		if dec.More() {
			return d, fmt.Errorf("%s:%d: trailing data after the JSON object", path, i+1)
		}
		d.lines++
		for _, rm := range l.ResourceMetrics {
			d.resources = append(d.resources, rm.Resource.Attributes)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					d.metrics = append(d.metrics, metricAt{rm.Resource.Attributes, m})
				}
			}
		}
		for _, rs := range l.ResourceSpans {
			d.resources = append(d.resources, rs.Resource.Attributes)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					d.spans = append(d.spans, spanAt{rs.Resource.Attributes, s})
				}
			}
		}
		for _, rl := range l.ResourceLogs {
			d.resources = append(d.resources, rl.Resource.Attributes)
			for _, sl := range rl.ScopeLogs {
				d.logs = append(d.logs, sl.LogRecords...)
			}
		}
	}
	return d, nil
}

// mustParse parses dir/<sig>.jsonl or fails the test.
func mustParse(t testing.TB, dir, sig string) signalData {
	t.Helper()
	d, err := parseJSONL(filepath.Join(dir, sig+".jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// named returns the metrics called name, in file order.
func (d signalData) named(name string) []metricAt {
	var out []metricAt
	for _, m := range d.metrics {
		if m.Name == name {
			out = append(out, m)
		}
	}
	return out
}

// spanCount counts spans called name.
func (d signalData) spanCount(name string) int {
	n := 0
	for _, s := range d.spans {
		if s.Name == name {
			n++
		}
	}
	return n
}

// identity is what every resource must carry.
type identity struct {
	user, jobID, node string
	overrides         map[string]bool // allowed service.name.override values
}

// checkIdentity reports every resource of d that lacks the identity.
func checkIdentity(t testing.TB, where string, d signalData, id identity) {
	t.Helper()
	if len(d.resources) == 0 {
		t.Errorf("%s: no resources at all", where)
	}
	bad := 0
	for _, r := range d.resources {
		var problems []string
		want := map[string]string{"user": id.user, "run_id": id.jobID, "slurm_job_id": id.jobID, "service.name": serviceName, "host.name": id.node}
		for k, v := range want {
			if got, ok := r.str(k); !ok || got != v {
				problems = append(problems, fmt.Sprintf("%s=%q (string %v), want %q", k, got, ok, v))
			}
		}
		if o, ok := r.str("service.name.override"); !ok || !id.overrides[o] {
			problems = append(problems, fmt.Sprintf("service.name.override=%q not one of %v", o, keys(id.overrides)))
		}
		if len(problems) > 0 {
			bad++
			if bad <= 3 {
				t.Errorf("%s: a resource lacks the identity: %s", where, strings.Join(problems, "; "))
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d resources lack the identity in all", where, bad)
	}
}

// overridesSeen lists the service.name.override values of d's resources.
func (d signalData) overridesSeen() map[string]bool {
	seen := map[string]bool{}
	for _, r := range d.resources {
		if o, ok := r.str("service.name.override"); ok {
			seen[o] = true
		}
	}
	return seen
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// points counts the data points of every metric (gauge, sum, histogram,
// summary): what the collector counts as metric points.
func (d signalData) points() int {
	n := 0
	for _, m := range d.metrics {
		switch {
		case m.Gauge != nil:
			n += len(m.Gauge.DataPoints)
		case m.Sum != nil:
			n += len(m.Sum.DataPoints)
		case m.Histogram != nil:
			n += len(m.Histogram.DataPoints)
		case m.Summary != nil:
			var s struct {
				DataPoints []json.RawMessage `json:"dataPoints"`
			}
			if json.Unmarshal(m.Summary, &s) == nil {
				n += len(s.DataPoints)
			}
		}
	}
	return n
}
