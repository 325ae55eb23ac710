package slurmdocker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// One OTLP-JSON line of the file exporter, as far as the tests read it.
type otlpLine struct {
	ResourceMetrics []struct {
		Resource     otlpResource `json:"resource"`
		ScopeMetrics []struct {
			Metrics []struct {
				Name  string `json:"name"`
				Gauge *struct {
					DataPoints []otlpPoint `json:"dataPoints"`
				} `json:"gauge"`
				Sum *struct {
					IsMonotonic bool        `json:"isMonotonic"`
					DataPoints  []otlpPoint `json:"dataPoints"`
				} `json:"sum"`
				Histogram *struct {
					DataPoints []otlpPoint `json:"dataPoints"`
				} `json:"histogram"`
				Summary *struct {
					DataPoints []otlpPoint `json:"dataPoints"`
				} `json:"summary"`
			} `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
	ResourceSpans []struct {
		Resource   otlpResource `json:"resource"`
		ScopeSpans []struct {
			Spans []struct {
				Name       string   `json:"name"`
				TraceID    string   `json:"traceId"`
				Attributes []otlpKV `json:"attributes"`
			} `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceLogs []struct {
		Resource  otlpResource `json:"resource"`
		ScopeLogs []struct {
			LogRecords []struct {
				TraceID    string   `json:"traceId"`
				Attributes []otlpKV `json:"attributes"`
			} `json:"logRecords"`
		} `json:"scopeLogs"`
	} `json:"resourceLogs"`
}

type otlpResource struct {
	Attributes []otlpKV `json:"attributes"`
}

type otlpPoint struct {
	Attributes []otlpKV `json:"attributes"`
}

type otlpKV struct {
	Key   string         `json:"key"`
	Value map[string]any `json:"value"`
}

func attrs(kvs []otlpKV) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		for _, v := range kv.Value {
			m[kv.Key] = fmt.Sprint(v)
		}
	}
	return m
}

// item is one metric, span or log record with its resource.
type item struct {
	signal    string // metric, span, log
	res       map[string]string
	name      string // metric or span name
	mtype     string // gauge, sum, histogram, summary
	monotonic bool
	attrs     []map[string]string // data point attributes, or the span's/log's
	traceID   string
}

// readOTLP reads a jsonl file of the file exporter into items. A missing
// file is an empty list; a partial last line is an error.
func readOTLP(t testing.TB, path string) []item {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var items []item
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l otlpLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s:%d: %v", path, n, err)
		}
		for _, rm := range l.ResourceMetrics {
			res := attrs(rm.Resource.Attributes)
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					it := item{signal: "metric", res: res, name: m.Name}
					var pts []otlpPoint
					switch {
					case m.Gauge != nil:
						it.mtype, pts = "gauge", m.Gauge.DataPoints
					case m.Sum != nil:
						it.mtype, it.monotonic, pts = "sum", m.Sum.IsMonotonic, m.Sum.DataPoints
					case m.Histogram != nil:
						it.mtype, pts = "histogram", m.Histogram.DataPoints
					case m.Summary != nil:
						it.mtype, pts = "summary", m.Summary.DataPoints
					}
					for _, p := range pts {
						it.attrs = append(it.attrs, attrs(p.Attributes))
					}
					items = append(items, it)
				}
			}
		}
		for _, rs := range l.ResourceSpans {
			res := attrs(rs.Resource.Attributes)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					items = append(items, item{signal: "span", res: res, name: s.Name, traceID: s.TraceID,
						attrs: []map[string]string{attrs(s.Attributes)}})
				}
			}
		}
		for _, rl := range l.ResourceLogs {
			res := attrs(rl.Resource.Attributes)
			for _, sl := range rl.ScopeLogs {
				for _, r := range sl.LogRecords {
					items = append(items, item{signal: "log", res: res, traceID: r.TraceID,
						attrs: []map[string]string{attrs(r.Attributes)}})
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return items
}

// find returns the items matching f.
func find(items []item, f func(item) bool) []item {
	var out []item
	for _, it := range items {
		if f(it) {
			out = append(out, it)
		}
	}
	return out
}

func metricNamed(name string) func(item) bool {
	return func(it item) bool { return it.signal == "metric" && it.name == name }
}

// anyPoint reports whether some data point (or span/log) has attribute k=v.
func anyPoint(items []item, k, v string) bool {
	for _, it := range items {
		for _, a := range it.attrs {
			if a[k] == v {
				return true
			}
		}
	}
	return false
}
