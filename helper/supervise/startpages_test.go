package supervise_test

import (
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestCollectorReleasesStartPages: the real collector, 2 s after its start,
// unmaps the pages of its binary that only the start used (the collector's
// startpages.go): its resident text falls to less than half of what it was
// when it became healthy, and it goes on working afterwards (a span sent
// after the release reaches traces.jsonl at the drain).
func TestCollectorReleasesStartPages(t *testing.T) {
	t.Parallel()
	bin := testenv.Collector(t)
	s := harness.StartSup(t, harness.Job{JobID: "4322"}).MustReady(t)
	pid := s.Report.CollectorPID
	text := func() float64 {
		seg, err := testenv.Segments(pid, bin)
		if err != nil || len(seg) == 0 {
			t.Fatalf("the collector's mappings of %s: %v %v", bin, seg, err)
		}
		return seg[0]
	}
	atReady := text()
	var now float64
	harness.WaitFor(t, 15*time.Second, "the collector's resident text below half of its size at ready", func() bool {
		now = text()
		return now < atReady/2
	})
	t.Logf("the collector's resident text: %.0f KiB when healthy, %.0f KiB after the release", atReady, now)

	body := `{"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60d",` +
		`"spanId":"eee19b7ec3c1b177","name":"after-release","kind":1,"startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}`
	postTraces(t, s, body)
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatalf("drain: %v\n%s", err, s.Output())
	}
	found := false
	for _, sp := range otlptest.MustRead(t, s.Out, "traces").Spans {
		found = found || sp.Name == "after-release"
	}
	if !found {
		t.Fatal("the span sent after the release is not in traces.jsonl")
	}
}
