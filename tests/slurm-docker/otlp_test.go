package slurmdocker

import (
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

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
// file is an empty list; a line that is not complete OTLP-JSON is an error.
func readOTLP(t testing.TB, path string) []item {
	t.Helper()
	d, err := otlptest.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	var items []item
	for _, m := range d.Metrics {
		it := item{signal: "metric", res: m.Resource.Text(), name: m.Name, mtype: m.Type()}
		if m.Sum != nil {
			it.monotonic = m.Sum.IsMonotonic
		}
		for _, a := range m.PointAttrs() {
			it.attrs = append(it.attrs, a.Text())
		}
		items = append(items, it)
	}
	for _, s := range d.Spans {
		items = append(items, item{signal: "span", res: s.Resource.Text(), name: s.Name, traceID: s.TraceID,
			attrs: []map[string]string{s.Attributes.Text()}})
	}
	for _, r := range d.Logs {
		items = append(items, item{signal: "log", res: r.Resource.Text(), traceID: r.TraceID,
			attrs: []map[string]string{r.Attributes.Text()}})
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
