package supervise_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestMeasure prints the numbers issue 3 asks for. It asserts nothing about
// time; it runs only with GYM_OTEL_MEASURE=1 (about 2 minutes):
//
//	GYM_OTEL_MEASURE=1 go test -run TestMeasure -v ./helper/supervise
//
// GYM_OTEL_MEASURE_BYTES_SECONDS (default 62) is how long the 15 s
// interval run for the jsonl volume lasts.
func TestMeasure(t *testing.T) {
	if os.Getenv("GYM_OTEL_MEASURE") != "1" {
		t.Skip("set GYM_OTEL_MEASURE=1 to measure")
	}
	vllm := harness.StartVLLM(t)
	var report []string
	say := func(format string, a ...any) {
		line := fmt.Sprintf(format, a...)
		report = append(report, line)
		t.Log(line)
	}

	// Start to ready, median of 10: wall time from exec to the Report
	// line, and the supervisor's own ready_ms.
	var wall, own []float64
	for i := 0; i < 10; i++ {
		s := harness.StartSup(t, harness.Job{JobID: strconv.Itoa(500 + i), VLLMPort: vllm}).MustReady(t)
		wall = append(wall, ms(s.ReportAfter))
		own = append(own, float64(s.Report.ReadyMillis))
		if _, err := s.Drain(t, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	say("start to ready (10 runs): median %.0f ms wall (exec to report line), median %.0f ms ready_ms; min %.0f max %.0f ms wall",
		median(wall), median(own), minf(wall), maxf(wall))

	// Idle: one vLLM target, no spans. RSS after 10 s, then the drain.
	s := harness.StartSup(t, harness.Job{JobID: "600", VLLMPort: vllm}).MustReady(t)
	time.Sleep(10 * time.Second)
	rss := harness.ProcStatus(t, s.Report.CollectorPID, "VmRSS")
	took, err := s.Drain(t, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	say("collector RSS idle (one vLLM target at 1 s, 10 s after ready): %s", rss)
	say("drain idle: %v total (SIGTERM to supervisor exit); collector stop %s", took.Round(time.Millisecond), stopMillis(s.Output()))

	// Under load: a Gym stand-in with many rollouts still sending when the
	// drain starts.
	s = harness.StartSup(t, harness.Job{JobID: "601", VLLMPort: vllm}).MustReady(t)
	gym := harness.StartProc(t, "gym-standin", s.GymEnv(""), testenv.Standin(t, "gym-standin"),
		"--rollouts", "3000", "--rollout-duration", "1ms", "--sandbox-provider", "local", "--flush-timeout", "10s")
	time.Sleep(3 * time.Second)
	loadRSS := harness.ProcStatus(t, s.Report.CollectorPID, "VmRSS")
	took, err = s.Drain(t, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	gym.Wait(t, 30*time.Second)
	spans := otlptest.MustRead(t, s.Out, "traces").SpanCount("gym.rollout")
	say("drain under load (gym-standin 3000 rollouts x 3 spans, SIGTERM 3 s in): %v total, of which the span-metrics wait %s and the collector stop %s; %d gym.rollout spans in traces.jsonl; RSS under load %s",
		took.Round(time.Millisecond), spanWaitOf(s.Output()), stopMillis(s.Output()), spans, loadRSS)
	assertAllParse(t, s.Out)

	// jsonl volume of an idle job with one vLLM target at 15 s.
	secs := 62
	if v := os.Getenv("GYM_OTEL_MEASURE_BYTES_SECONDS"); v != "" {
		secs, _ = strconv.Atoi(v)
	}
	for _, interval := range []int{1, 15} {
		d := time.Duration(secs) * time.Second
		if interval == 1 {
			d = 31 * time.Second
		}
		s = harness.StartSup(t, harness.Job{JobID: "602", VLLMPort: vllm, Scrape: interval}).MustReady(t)
		time.Sleep(d)
		if _, err := s.Drain(t, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, sig := range []string{"metrics", "traces", "logs"} {
			if fi, err := os.Stat(filepath.Join(s.Out, sig+".jsonl")); err == nil {
				total += fi.Size()
			}
		}
		m := otlptest.MustRead(t, s.Out, "metrics")
		scrapes := len(m.Named("vllm_e2e_request_latency_seconds"))
		perScrape := float64(total) / float64(max(scrapes, 1))
		say("jsonl volume, one vLLM target at %d s for %v: %d bytes in %d lines, %d scrapes, %.0f bytes/scrape -> %.2f MiB/hour at a 15 s interval (240 scrapes/hour)",
			interval, d, total, m.Lines, scrapes, perScrape, perScrape*240/(1<<20))
	}
	fmt.Println("MEASURE:\n  " + strings.Join(report, "\n  "))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

var (
	stopRE = regexp.MustCompile(`collector stopped in (\d+) ms`)
	waitRE = regexp.MustCompile(`waiting ([0-9.]+m?s) for the span metrics`)
)

func stopMillis(log string) string {
	if m := stopRE.FindStringSubmatch(log); m != nil {
		return m[1] + " ms"
	}
	return "?"
}

func spanWaitOf(log string) string {
	if m := waitRE.FindStringSubmatch(log); m != nil {
		return m[1]
	}
	return "0 s"
}
