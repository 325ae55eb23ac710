package supervise_test

import (
	"bytes"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestSampledHint: with the real collector, a vLLM stand-in and
// node_exporter scraped every second, the supervisor started with a record
// and the control socket's listener (as the plugin starts it) answers on its
// control socket: two targets, and a
// time that advances with the scrapes and is never later than the newest
// up point of either target in metrics.jsonl. Also reports the
// supervisor's CPU time with and without the samples to follow.
func TestSampledHint(t *testing.T) {
	t.Parallel()
	vllm := harness.StartVLLM(t)
	node := harness.StartNodeExporter(t)
	dir := harness.SharedDir(t)
	rec := filepath.Join(dir, "record")
	if err := os.WriteFile(rec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8181", VLLMPort: vllm, NodePort: node, Record: rec}).MustReady(t)
	if !s.Report.Control {
		t.Fatalf("report: no control socket on the listener handed on (%s)", s.ControlPath)
	}
	read := func() (targets int, at time.Time) {
		c, err := net.DialTimeout("unix", s.ControlPath, time.Second)
		if err != nil {
			return 0, time.Time{}
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("sampled\n"))
		data, _ := io.ReadAll(io.LimitReader(c, 256))
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "targets="); ok {
				targets, _ = strconv.Atoi(v)
			}
			if v, ok := strings.CutPrefix(line, "sampled_ms="); ok {
				if ms, _ := strconv.ParseInt(v, 10, 64); ms > 0 {
					at = time.UnixMilli(ms)
				}
			}
		}
		return targets, at
	}
	var first time.Time
	harness.WaitFor(t, 10*time.Second, "a sampled time in the hint", func() bool {
		n, at := read()
		first = at
		return n == 2 && !at.IsZero()
	})
	mark := time.Now()
	harness.WaitFor(t, 10*time.Second, "a sampled time after "+mark.Format(time.RFC3339Nano), func() bool {
		_, at := read()
		return !at.Before(mark)
	})
	n, at := read()
	if n != 2 || !at.After(first) {
		t.Errorf("hint: %d targets, time %v after %v", n, at, first)
	}
	if at.After(time.Now()) {
		t.Errorf("the hint's time %v is in the future", at)
	}
	// The hint is never ahead of the files: every target's newest up
	// point is at or after it.
	var last map[string]time.Time
	harness.WaitFor(t, 10*time.Second, "metrics.jsonl parsed with both targets", func() bool {
		last = lastUp(t, s.Out)
		return len(last) == 2
	})
	for name, l := range last {
		// (the test's parser keeps nanoseconds as a float64: 1 µs slack)
		if l.Add(time.Microsecond).Before(at) {
			t.Errorf("%s: newest up point %v is before the hint's %v", name, l, at)
		}
	}
	time.Sleep(5 * time.Second)
	ran := time.Since(s.Started)
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	withHint := supCPU(t, s)
	// The same run without a record and a listener (no control socket, no
	// follower), for the cost.
	b := harness.StartSup(t, harness.Job{JobID: "8182", VLLMPort: vllm, NodePort: node}).MustReady(t)
	if b.Report.Control {
		t.Errorf("a control socket without a listener handed on")
	}
	time.Sleep(time.Until(b.Started.Add(ran)))
	if _, err := b.Drain(t, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("supervisor CPU over %v, two targets at 1 s: %v following the samples, %v without", ran.Round(time.Second), withHint, supCPU(t, b))
}

// lastUp returns, per scrape job, the time of its newest up point in
// dir/metrics.jsonl, read up to its last complete line (the file exporter
// flushes its buffer on its interval, not at line ends).
func lastUp(t testing.TB, dir string) map[string]time.Time {
	out := map[string]time.Time{}
	for name, dp := range newestUp(t, dir) {
		out[name] = time.Unix(0, int64(dp.Time))
	}
	return out
}

// newestUp returns, per scrape job, its newest up point in
// dir/metrics.jsonl, read up to its last complete line.
func newestUp(t testing.TB, dir string) map[string]otlptest.NumberPoint {
	data, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	i := bytes.LastIndexByte(data, '\n')
	if i < 0 {
		return nil
	}
	tmp := filepath.Join(t.TempDir(), "metrics.jsonl")
	if err := os.WriteFile(tmp, data[:i+1], 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := otlptest.Read(tmp)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]otlptest.NumberPoint{}
	for _, m := range d.Named("up") {
		name, _ := m.Resource.Str("service.name.override")
		if m.Gauge == nil || name == vocab.CgroupProducer {
			continue // the supervisor's own scrape: not the job's target
		}
		for _, dp := range m.Gauge.DataPoints {
			if old, ok := out[name]; !ok || dp.Time > old.Time {
				out[name] = dp
			}
		}
	}
	return out
}

// supCPU is the exited supervisor's user+system CPU time.
func supCPU(t testing.TB, s *harness.Sup) time.Duration {
	t.Helper()
	ps := s.Cmd.ProcessState
	if ps == nil {
		t.Fatal("the supervisor has not exited")
	}
	r, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// TestFailedScrapeNoStaleMarker: a target killed before the drain (the
// job's services die before the epilog) leaves failed scrapes, whose
// staleness markers (points without a value) the collector drops: each
// vLLM series' last point in metrics.jsonl is its last value, and up's
// last point is 0.
func TestFailedScrapeNoStaleMarker(t *testing.T) {
	t.Parallel()
	port := harness.FreePort(t)
	vllm := harness.StartProc(t, "vllm-standin", nil, testenv.Standin(t, "vllm-standin"), "--port", strconv.Itoa(port), "--model", "standin-model")
	harness.WaitFor(t, 10*time.Second, "vllm-standin", func() bool { return harness.HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/health", port)) })
	s := harness.StartSup(t, harness.Job{JobID: "8282", VLLMPort: port}).MustReady(t)
	harness.WaitFor(t, 15*time.Second, "two scrapes of the stand-in", func() bool {
		m := lastUp(t, s.Out)
		return !m["gym-vllm/policy"].IsZero() && len(counterValues(t, s.Out, "vllm_prompt_tokens_total")) >= 2
	})
	vllm.Kill()
	// Failed scrapes: the target's newest up point in the files is 0.
	harness.WaitFor(t, 15*time.Second, "a failed scrape of the killed stand-in in metrics.jsonl", func() bool {
		dp, ok := newestUp(t, s.Out)["gym-vllm/policy"]
		return ok && dp.Value() == 0
	})
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	d := otlptest.MustRead(t, s.Out, "metrics")
	var ups []otlptest.NumberPoint
	for _, m := range d.Named("up") {
		if o, _ := m.Resource.Str("service.name.override"); m.Gauge != nil && o == "gym-vllm/policy" {
			ups = append(ups, m.Gauge.DataPoints...)
		}
	}
	if len(ups) == 0 || ups[len(ups)-1].Value() != 0 {
		t.Fatalf("no failed scrape recorded (up points %v): the test did not kill the target in time", ups)
	}
	for _, name := range []string{"vllm_prompt_tokens_total", "vllm_num_requests_running"} {
		for _, m := range d.Named(name) {
			var dps []otlptest.NumberPoint
			if m.Sum != nil {
				dps = m.Sum.DataPoints
			} else if m.Gauge != nil {
				dps = m.Gauge.DataPoints
			}
			for _, dp := range dps {
				if dp.Flags != 0 || (dp.AsDouble == nil && dp.AsInt == nil) {
					t.Errorf("%s: a point without a value (flags %d) reached metrics.jsonl", name, dp.Flags)
				}
			}
		}
	}
	for _, m := range d.Named("vllm_e2e_request_latency_seconds") {
		if m.Histogram == nil {
			continue
		}
		for _, dp := range m.Histogram.DataPoints {
			if dp.Flags != 0 {
				t.Errorf("vllm_e2e_request_latency_seconds: a point without a value (flags %d) reached metrics.jsonl", dp.Flags)
			}
		}
	}
}

// counterValues lists the values of Sum metric name in dir/metrics.jsonl,
// read up to its last complete line.
func counterValues(t testing.TB, dir, name string) []float64 {
	ps, err := otlptest.SumPoints(filepath.Join(dir, "metrics.jsonl"), name)
	if err != nil {
		t.Fatal(err)
	}
	var v []float64
	for _, p := range ps {
		v = append(v, p.Value)
	}
	return v
}

// TestFinalScrapeNow: with the real collector scraping a vLLM stand-in and
// node_exporter at a 60 s interval, root's "final" line on the control socket
// (the batch step's, at the script's end) is answered "ok", and the
// supervisor stops the collector run, which scrapes both targets as it
// stops: the hold's answer then says every target has a sample at or
// after the request, every target's newest up point in metrics.jsonl is
// at or after it, a new collector run serves the same ports with a
// configuration without scrape_on_shutdown, a second request changes
// nothing, and the drain's receipt has the final figures of both runs.
func TestFinalScrapeNow(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the final-scrape request is root's (slurmstepd's): run as root")
	}
	vllm := harness.StartVLLM(t)
	node := harness.StartNodeExporter(t)
	dir := harness.SharedDir(t)
	rec := filepath.Join(dir, "record")
	if err := os.WriteFile(rec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8183", VLLMPort: vllm, NodePort: node, Record: rec, Scrape: 60}).MustReady(t)
	cfg := func() string {
		b, err := os.ReadFile(filepath.Join(s.Out, "collector.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if !strings.Contains(cfg(), "scrape_on_shutdown: true") {
		t.Fatalf("the first run's collector.yaml does not set scrape_on_shutdown:\n%s", cfg())
	}
	say := func(line string) string {
		c, err := net.DialTimeout("unix", s.ControlPath, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte(line + "\n"))
		data, _ := io.ReadAll(io.LimitReader(c, 256))
		return string(data)
	}
	time.Sleep(time.Second)
	mark := time.Now()
	if got := say("final"); got != "ok\n" {
		t.Fatalf("final: answer %q, want ok", got)
	}
	harness.WaitFor(t, 30*time.Second, "the hold's answer: every target sampled after the request", func() bool {
		a := say("sampled")
		var ms int64
		for _, line := range strings.Split(a, "\n") {
			if v, ok := strings.CutPrefix(line, "sampled_ms="); ok {
				ms, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return strings.Contains(a, "targets=2\n") && ms >= mark.UnixMilli()
	})
	for name, l := range lastUp(t, s.Out) {
		if l.Before(mark.Truncate(time.Millisecond)) {
			t.Errorf("%s: newest up point %v is before the final-scrape request %v", name, l, mark)
		}
	}
	var pid int
	harness.WaitFor(t, 30*time.Second, "a new collector run", func() bool {
		st := s.State(t)
		pid = st.CollectorPID
		return pid != 0 && pid != s.Report.CollectorPID
	})
	if strings.Contains(cfg(), "scrape_on_shutdown") {
		t.Errorf("the next run's collector.yaml still sets scrape_on_shutdown")
	}
	if !harness.HTTPOK(s.HealthURL()) {
		t.Errorf("the next run does not answer on the health port")
	}
	if got := say("final"); got != "ok\n" {
		t.Errorf("a second final: answer %q, want ok", got)
	}
	time.Sleep(2 * time.Second)
	if st := s.State(t); st.CollectorPID != pid {
		t.Errorf("a second final request restarted the collector again (pid %d, then %d)", pid, st.CollectorPID)
	}
	if _, err := s.Drain(t, 40*time.Second); err != nil {
		t.Fatal(err)
	}
	rc, err := receipt.Read(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	if !rc.Complete() || rc.Collectors != 2 {
		t.Errorf("receipt: %s; want final figures of 2 collector runs", strings.Join(rc.Summary(), "; "))
	}
}
