package supervise_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestFirstSample measures, with the real collector, how long each scrape
// target waits for its first sample: from the supervisor's ready report to
// the timestamp of the target's first `up` point in metrics.jsonl, for a
// vLLM stand-in and node_exporter, at scrape intervals 5 s and 15 s. It
// asserts that no target waits more than one interval (plus 1 s of
// discovery and scheduling slack). It runs only with GYM_OTEL_MEASURE=1;
// GYM_OTEL_MEASURE_RUNS (default 4) is the number of runs per interval:
//
//	GYM_OTEL_MEASURE=1 go test -run TestFirstSample -v ./helper/supervise
func TestFirstSample(t *testing.T) {
	if os.Getenv("GYM_OTEL_MEASURE") != "1" {
		t.Skip("set GYM_OTEL_MEASURE=1 to measure")
	}
	runs := 4
	if v := os.Getenv("GYM_OTEL_MEASURE_RUNS"); v != "" {
		runs, _ = strconv.Atoi(v)
	}
	vllm := harness.StartVLLM(t)
	node := harness.StartNodeExporter(t)
	var report []string
	for _, interval := range []int{5, 15} {
		delays := map[string][]float64{}
		for i := 0; i < runs; i++ {
			s := harness.StartSup(t, harness.Job{JobID: strconv.Itoa(700 + i), VLLMPort: vllm, NodePort: node, Scrape: interval}).MustReady(t)
			ready := s.Started.Add(s.ReportAfter)
			var first map[string]time.Time
			harness.WaitFor(t, time.Duration(2*interval+10)*time.Second, "a sample of every target", func() bool {
				first = firstUp(t, s.Out)
				_, v := first["gym-vllm/policy"]
				_, n := first["node"]
				return v && n // and the cgroup job's, when served
			})
			if _, err := s.Drain(t, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			for name, at := range first {
				d := at.Sub(ready)
				delays[name] = append(delays[name], d.Seconds())
				if d > time.Duration(interval)*time.Second+time.Second {
					t.Errorf("interval %d s: %s waited %.1f s for its first sample (more than one interval)", interval, name, d.Seconds())
				}
			}
		}
		for _, name := range []string{"gym-vllm/policy", "node", "cgroup"} {
			v := delays[name]
			if len(v) == 0 {
				continue
			}
			line := fmt.Sprintf("interval %2d s, %s: ready -> first sample %s s (median %.1f, max %.1f)",
				interval, name, fmtList(v), median(v), maxf(v))
			report = append(report, line)
			t.Log(line)
		}
	}
	fmt.Println("FIRST SAMPLE:\n  " + strings.Join(report, "\n  "))
}

// firstUp returns, per scrape job (service.name.override), the time of its
// first `up` point in dir/metrics.jsonl.
func firstUp(t testing.TB, dir string) map[string]time.Time {
	d, err := otlptest.Read(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return nil // a line being written: try again
	}
	out := map[string]time.Time{}
	for _, m := range d.Named("up") {
		name, _ := m.Resource.Str("service.name.override")
		if m.Gauge == nil {
			continue
		}
		for _, dp := range m.Gauge.DataPoints {
			at := time.Unix(0, int64(dp.Time))
			if old, ok := out[name]; !ok || at.Before(old) {
				out[name] = at
			}
		}
	}
	return out
}

func fmtList(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, ", ")
}
