package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// upLine is one metrics.jsonl line as the file exporter writes it: an up
// point of job at ns, beside another metric.
func upLine(job, instance string, ns int64) string {
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}},`+
		`{"key":"service.instance.id","value":{"stringValue":%q}},{"key":"service.name.override","value":{"stringValue":%q}}]},`+
		`"scopeMetrics":[{"scope":{},"metrics":[{"name":"vllm_x","sum":{"dataPoints":[{"timeUnixNano":"1","asDouble":3}]}},`+
		`{"name":"up","gauge":{"dataPoints":[{"timeUnixNano":"%d","asDouble":1}]}}]}]}]}`+"\n", instance, job, ns)
}

// TestSampleFollower: the hint's time is the oldest of the targets' latest
// up points, zero until every target has one; lines are read as they grow,
// a partial line only once complete.
func TestSampleFollower(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metrics.jsonl")
	targets := []render.Target{{Job: "gym-vllm/policy", Instance: "n1:8000", Port: 8000}, {Job: "node", Instance: "n1:9100", Port: 9100}}
	f := newSampleFollower(path, targets)
	appendTo := func(s string) {
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		fh.WriteString(s)
		fh.Close()
	}
	poll := func() time.Time {
		if err := f.poll(); err != nil {
			t.Fatal(err)
		}
		return f.sampledAt()
	}
	if at := poll(); !at.IsZero() {
		t.Fatalf("no file: %v", at)
	}
	appendTo(upLine("gym-vllm/policy", "n1:8000", 5e9))
	if at := poll(); !at.IsZero() {
		t.Fatalf("one target of two: %v", at)
	}
	// A Gym producer named like a scrape job but without its instance
	// does not count.
	appendTo(upLine("node", "", 9e9))
	if at := poll(); !at.IsZero() {
		t.Fatalf("a foreign resource counted: %v", at)
	}
	line := upLine("node", "n1:9100", 7e9)
	appendTo(line[:40])
	if at := poll(); !at.IsZero() {
		t.Fatalf("a partial line counted: %v", at)
	}
	appendTo(line[40:])
	if at := poll(); at.UnixNano() != 5e9 {
		t.Fatalf("both targets: got %v, want the older latest (5 s)", at.UnixNano())
	}
	appendTo(upLine("gym-vllm/policy", "n1:8000", 12e9))
	if at := poll(); at.UnixNano() != 7e9 {
		t.Fatalf("after a newer vLLM sample: got %v, want 7 s", at.UnixNano())
	}
}

// TestFollowSamplesHint: the hint file says targets and the time, and
// targets=0 when the node has none.
func TestFollowSamplesHint(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "record")
	hint := filepath.Join(dir, SampledFile)
	metrics := filepath.Join(dir, "metrics.jsonl")
	os.WriteFile(hint, nil, 0o600)
	os.WriteFile(metrics, []byte(upLine("node", "n1:9100", 1700000000123456789)), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		followSamples(ctx, rec, metrics, []render.Target{{Job: "node", Instance: "n1:9100"}}, 10*time.Millisecond)
		close(done)
	}()
	want := "targets=1\nsampled_ms=1700000000123\n"
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(hint)
		if string(b) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hint %q, want %q", b, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	followSamples(context.Background(), rec, metrics, nil, time.Millisecond)
	if b, _ := os.ReadFile(hint); string(b) != "targets=0\nsampled_ms=0\n" {
		t.Fatalf("no targets: hint %q", b)
	}
	// No hint file (no plugin prolog): nothing is created.
	os.Remove(hint)
	followSamples(context.Background(), rec, metrics, nil, time.Millisecond)
	if _, err := os.Stat(hint); !os.IsNotExist(err) {
		t.Fatalf("a hint was created: %v", err)
	}
}
