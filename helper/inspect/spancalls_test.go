package inspect

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// spanMetricsLine is one export of the connector: span name's calls and
// its duration histogram's count (all in the (10, 20] bucket).
func spanMetricsLine(node, name string, sec, calls, count int) string {
	attrs := fmt.Sprintf(`[{"key":"span.name","value":{"stringValue":%q}},{"key":"status.code","value":{"stringValue":"STATUS_CODE_UNSET"}}]`, name)
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[`+
		`{"name":%q,"sum":{"dataPoints":[{"attributes":%s,"startTimeUnixNano":"%d","timeUnixNano":"%d","asInt":"%d"}],"aggregationTemporality":2,"isMonotonic":true}},`+
		`{"name":%q,"unit":"ms","histogram":{"dataPoints":[{"attributes":%s,"startTimeUnixNano":"%d","timeUnixNano":"%d","count":"%d","sum":%d,`+
		`"bucketCounts":["0","%d","0"],"explicitBounds":[10,20]}],"aggregationTemporality":2}}]}]}]}`+"\n",
		res(node, "nemo-gym/agent", ""), mSpanCalls, attrs, ns(1), ns(sec), calls, mSpanDuration, attrs, ns(1), ns(sec), count, 15*count, count)
}

// TestSpanCallsOneFigure: a span name the connector counted (calls 2, its
// histogram 2, 2 raw spans) keeps the connector's calls without a note; a
// name first seen in the collector's last seconds (calls 0 beside a
// histogram count of 1), and one whose count the connector never exported
// (3 raw spans, no point beyond the new series' 0), get the larger figure
// and a note saying so, in the report, its JSON, its text and its HTML.
func TestSpanCallsOneFigure(t *testing.T) {
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := spanMetricsLine("gn1", "gym.rollout", 2, 0, 0) + spanMetricsLine("gn1", "gym.rollout", 4, 2, 2) +
		spanMetricsLine("gn1", "gym.late", 6, 0, 1) + spanMetricsLine("gn1", "gym.last", 6, 0, 0)
	tr := spanLine("gn1", sp("gym.rollout", "t1", 1, 15, "", ""), sp("gym.rollout", "t2", 2, 15, "", ""),
		sp("gym.late", "t3", 5, 15, "", ""),
		sp("gym.last", "t4", 5, 15, "", ""), sp("gym.last", "t5", 5, 15, "", ""), sp("gym.last", "t6", 5, 15, "", ""))
	for f, data := range map[string]string{"metrics.jsonl": m, "traces.jsonl": tr} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		calls, connector float64
		note             string
	}{
		"gym.rollout": {2, 2, ""},
		"gym.late":    {1, 0, "below its duration histogram's count (1)"},
		"gym.last":    {3, 0, "below its raw spans in traces.jsonl (3)"},
	}
	if len(r.Spans.SpanMetrics) != len(want) {
		t.Fatalf("span metrics %+v", r.Spans.SpanMetrics)
	}
	for _, x := range r.Spans.SpanMetrics {
		w := want[x.Name]
		if float64(x.Calls) != w.calls || float64(x.ConnectorCalls) != w.connector || (w.note == "") != (x.CallsNote == "") || !strings.Contains(x.CallsNote, w.note) {
			t.Errorf("%s: calls %v, connector's %v, note %q; want %v, %v, a note with %q", x.Name, x.Calls, x.ConnectorCalls, x.CallsNote, w.calls, w.connector, w.note)
		}
	}
	j, err := json.Marshal(r.Spans.SpanMetrics)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `"name":"gym.late","calls":1,"connector_calls":0,"calls_note":"the connector's calls (0) are below its duration histogram's count (1)`) {
		t.Errorf("JSON: %s", j)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, w := range []string{"gym.late", "calls      1", "note: the connector's calls (0) are below its duration histogram's count (1)", "(3)"} {
		if !strings.Contains(text, w) {
			t.Errorf("text lacks %q:\n%s", w, text)
		}
	}
	if strings.Contains(text, "calls      0") || strings.Count(text, "note: the connector's calls") != 2 {
		t.Errorf("text: a calls 0 figure, or not two notes:\n%s", text)
	}
	var h strings.Builder
	if err := r.WriteHTML(&h, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Count(h.String(), "(note: the connector&#39;s calls (0) are below") != 2 {
		t.Errorf("HTML: not two notes in the span metrics table")
	}
}
