package supervise_test

// A backend that hangs, refuses connections, throttles (429/503 with
// Retry-After) or takes seconds per request, while a producer sends spans
// at a high rate: every span the collector accepted is in traces.jsonl,
// none is refused because of the backend, the receipt accounts for every
// span the backend did not get, and the collector's memory stays bounded.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

var (
	loadgenOnce sync.Once
	loadgenPath string
	loadgenErr  error
)

// loadgenBin builds tests/bench/loadgen once, beside the CLI.
func loadgenBin(t testing.TB) string {
	t.Helper()
	dir := filepath.Dir(harness.CLI(t))
	loadgenOnce.Do(func() {
		loadgenPath = filepath.Join(dir, "loadgen")
		cmd := exec.Command("go", "build", "-o", loadgenPath, "./tests/bench/loadgen")
		cmd.Dir = testenv.Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			loadgenErr = fmt.Errorf("go build ./tests/bench/loadgen: %v\n%s", err, out)
		}
	})
	if loadgenErr != nil {
		t.Fatal(loadgenErr)
	}
	return loadgenPath
}

// outageKind is one backend behaviour: start returns the endpoint the
// collector exports to, when one stands behind it the real backend, and
// how to end the behaviour (its process stopped, its port free again).
type outageKind struct {
	name  string
	start func(t *testing.T, token string) (string, *harness.Backend, func())
}

// blackhole starts the misbehaving backend as outageKind.start returns it.
func blackhole(t *testing.T, mode string, args ...string) (string, *harness.Backend, func()) {
	url, p := harness.StartBlackholeProc(t, mode, args...)
	return url, nil, p.Kill
}

// outageKinds are the backend behaviours; the slow one holds each request
// for slowDelay, which should stay below the export timeout (a request that
// timed out at the collector is counted failed, or retried, yet still
// reaches the backend behind the delay).
func outageKinds(slowDelay time.Duration) []outageKind {
	return []outageKind{
		{"hang", func(t *testing.T, _ string) (string, *harness.Backend, func()) { return blackhole(t, "hang") }},
		{"refuse", func(t *testing.T, _ string) (string, *harness.Backend, func()) {
			return fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t)), nil, func() {}
		}},
		{"429", func(t *testing.T, _ string) (string, *harness.Backend, func()) {
			return blackhole(t, "429", "--retry-after", "1")
		}},
		{"503", func(t *testing.T, _ string) (string, *harness.Backend, func()) {
			return blackhole(t, "503", "--retry-after", "1")
		}},
		{"slow", func(t *testing.T, token string) (string, *harness.Backend, func()) {
			be := harness.StartBackend(t, token)
			url, _, stop := blackhole(t, "slow", "--delay", slowDelay.String(), "--upstream", be.URL)
			return url, be, stop
		}},
	}
}

// memSample is the collector's memory at one moment.
type memSample struct {
	at        time.Duration // since the load started
	rss, anon int64         // KiB
}

// loadResult is loadgen's summary of one step.
type loadResult struct {
	OK       int64   `json:"ok_spans"`
	Failed   int64   `json:"failed_spans"`
	Achieved float64 `json:"achieved_rate"`
	Seconds  float64 `json:"seconds"`
	FirstErr string  `json:"first_error"`
}

// outageRun is what one run under a misbehaving backend left.
type outageRun struct {
	kind          string
	rate          int
	load          loadResult
	files         int64 // loadgen spans in traces.jsonl
	backend       int64 // loadgen spans the real backend wrote; -1: none stands behind
	rc            *receipt.Receipt
	mem           []memSample
	drain         time.Duration
	drainErr      error
	memoryLimitMB int
	stalled       bool   // loadgen was still sending 90 s after dur and was killed
	out           string // the collector's output dir
	supLog        string // the supervisor's output
}

// runOutage runs a supervised collector (memory_limit_mib mem, export and
// shutdown timeouts export/shutdown seconds) against kind's backend, sends
// rate spans/s for dur with loadgen, drains, and returns what was left.
func runOutage(t *testing.T, kind outageKind, rate int, dur time.Duration, mem, export, shutdown int) outageRun {
	t.Helper()
	return runLoad(t, kind, rate, dur, harness.Job{JobID: "2323", Memory: mem, Export: export, Shutdown: shutdown})
}

// runLoad is runOutage for the job j (its Endpoint and Token are set
// here, from kind). It measures the collector's own exporter: the job has
// otel.delivery: collector unless j.Site says otherwise (delivery from
// the files is fileJob's, filedelivery_test.go).
func runLoad(t *testing.T, kind outageKind, rate int, dur time.Duration, j harness.Job) outageRun {
	t.Helper()
	lg := loadgenBin(t)
	token := "outage-" + harness.RandHex(6)
	ep, be, _ := kind.start(t, token)
	j.Endpoint, j.Token = ep, token
	if j.Site == "" {
		j.Site = "  delivery: collector\n"
	}
	mem := j.Memory
	s := harness.StartSup(t, j).MustReady(t)
	if j.Site == "  delivery: collector\n" {
		checkCollectorToken(t, s.Report.CollectorPID, token, true)
	}
	run := outageRun{kind: kind.name, rate: rate, backend: -1, memoryLimitMB: mem}

	// The collector's memory every second until the drain is over.
	stop := make(chan struct{})
	var samplerDone sync.WaitGroup
	start := time.Now()
	samplerDone.Add(1)
	go func() {
		defer samplerDone.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if rss, anon, ok := memOf(s.Report.CollectorPID); ok {
				run.mem = append(run.mem, memSample{time.Since(start), rss, anon})
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	out := filepath.Join(s.Dir, "loadgen.json")
	env := []string{
		"PATH=/usr/bin:/bin",
		fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", s.Report.Ports.OTLPHTTP),
		"OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20" + s.ReceiverToken,
	}
	p := harness.StartProc(t, "loadgen", env, lg, "--steps", fmt.Sprintf("%d:%s", rate, dur), "--pause", "0s",
		"--tag", "outage-"+kind.name, "--workers", "4", "--batch", "200", "--out", out)
	select {
	case <-p.Done:
		if p.Err != nil {
			t.Fatalf("loadgen: %v\n%s", p.Err, p.Out.String())
		}
		var steps []loadResult
		data, err := os.ReadFile(out)
		if err == nil {
			err = json.Unmarshal(data, &steps)
		}
		if err != nil || len(steps) != 1 {
			t.Fatalf("loadgen's summary %q: %v", data, err)
		}
		run.load = steps[0]
	case <-time.After(dur + 90*time.Second):
		// The collector holds the producer's requests: loadgen cannot
		// keep its rate and would take far longer than dur.
		p.Kill()
		run.stalled = true
	}

	run.drain, run.drainErr = s.Drain(t, 3*time.Minute)
	close(stop)
	samplerDone.Wait()
	run.out, run.supLog = s.Out, s.Output()
	run.files = countSpans(t, filepath.Join(s.Out, "traces.jsonl"))
	if be != nil {
		be.Stop(t)
		run.backend = countSpans(t, filepath.Join(be.Dir, "traces.jsonl"))
	}
	var err error
	run.rc, err = receipt.Read(s.Out)
	if err != nil {
		t.Fatalf("%v\n%s", err, s.Output())
	}
	return run
}

// memOf returns VmRSS and RssAnon of pid in KiB.
func memOf(pid int) (rss, anon int64, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "RssAnon":
			anon = n
		}
	}
	return rss, anon, rss > 0
}

// countSpans counts loadgen's spans ("bench.span") in an OTLP-JSON jsonl
// file; a missing file holds none.
func countSpans(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	r := bufio.NewReaderSize(f, 1<<20)
	needle := []byte(`"name":"bench.span"`)
	for {
		line, err := r.ReadBytes('\n')
		n += int64(bytes.Count(line, needle))
		if err != nil {
			break
		}
	}
	return n
}

// peak returns the highest RSS and RssAnon sampled, in MiB.
func (r outageRun) peak() (rss, anon float64) {
	for _, m := range r.mem {
		rss = max(rss, float64(m.rss)/1024)
		anon = max(anon, float64(m.anon)/1024)
	}
	return rss, anon
}

// line is the run in one line: what the producer was told, what the
// files, the backend and the receipt hold, memory and the drain.
func (r outageRun) line() string {
	c := r.rc.Signals["traces"]
	rss, anon := r.peak()
	be := "-"
	if r.backend >= 0 {
		be = strconv.FormatInt(r.backend, 10)
	}
	producer := fmt.Sprintf("producer ok %d refused %d (%.0f/s)", r.load.OK, r.load.Failed, r.load.Achieved)
	if r.stalled {
		producer = "producer STALLED (still sending 90 s after its end, killed)"
	}
	return fmt.Sprintf("%-6s %6d/s: %s; traces.jsonl %d; backend %s; receipt %s received %d refused %d written %d sent %d send_failed %d enqueue_failed %d; peak RSS %.0f MiB (anon %.0f); drain %v (%v)",
		r.kind, r.rate, producer, r.files, be, r.rc.Basis, c.Received, c.Refused, c.Written, c.Sent, c.SendFailed, c.EnqueueFailed,
		rss, anon, r.drain.Round(100*time.Millisecond), r.drainErr)
}

// summary is the run as `make bench` reads it.
func (r outageRun) summary(secs int) testenv.OutageSummary {
	c := r.rc.Signals["traces"]
	rss, anon := r.peak()
	s := testenv.OutageSummary{Kind: r.kind, Rate: r.rate, Seconds: secs, Accepted: r.load.OK, Refused: r.load.Failed, Stalled: r.stalled,
		Files: r.files, Backend: r.backend, Basis: r.rc.Basis, Received: c.Received, Written: c.Written, Sent: c.Sent,
		SendFailed: c.SendFailed, EnqueueFailed: c.EnqueueFailed, Unknown: r.rc.Unknown, PeakRSS: rss, PeakAnon: anon,
		MemoryLimit: r.memoryLimitMB, Drain: r.drain.Seconds()}
	if r.drainErr != nil {
		s.DrainErr = r.drainErr.Error()
	}
	return s
}

// memSeries is the RSS (anon) in MiB every step seconds.
func (r outageRun) memSeries(step time.Duration) string {
	var parts []string
	next := time.Duration(0)
	for _, m := range r.mem {
		if m.at >= next {
			parts = append(parts, fmt.Sprintf("%ds %.0f (%.0f)", int(m.at.Seconds()), float64(m.rss)/1024, float64(m.anon)/1024))
			next = m.at + step
		}
	}
	return strings.Join(parts, ", ")
}

// TestCollectorOutageKeepsFiles: with otel.delivery: collector, for each
// backend behaviour, a short run at a high span rate. Every span the producer was told was accepted is in
// traces.jsonl; the producer was refused nothing; the receipt has final
// figures that match the files and account for every span the backend
// did not get; the collector's anonymous memory stayed below
// memory_limit_mib.
func TestCollectorOutageKeepsFiles(t *testing.T) {
	t.Parallel()
	const mem = 256
	for _, kind := range outageKinds(500 * time.Millisecond) {
		t.Run(kind.name, func(t *testing.T) {
			r := runOutage(t, kind, 20000, 10*time.Second, mem, 2, 11)
			t.Log(r.line())
			t.Logf("memory (MiB RSS (anon)): %s", r.memSeries(2*time.Second))
			c := r.rc.Signals["traces"]
			if r.stalled {
				t.Fatal("the producer could not send: the collector held its requests")
			}
			if r.load.Failed != 0 {
				t.Errorf("the producer was refused %d spans (%s)", r.load.Failed, r.load.FirstErr)
			}
			if r.load.OK == 0 {
				t.Fatal("the producer sent nothing")
			}
			if r.files < r.load.OK {
				t.Errorf("traces.jsonl holds %d of the %d spans the producer was told were accepted", r.files, r.load.OK)
			}
			if !r.rc.Complete() {
				t.Errorf("receipt basis %q, want final figures: %v", r.rc.Basis, r.rc.Unknown)
			}
			if r.drainErr != nil {
				t.Errorf("the drain did not exit 0: %v", r.drainErr)
			}
			if c.Refused != 0 || c.Received != r.files || c.Written != r.files || c.WriteFailed != 0 {
				t.Errorf("receipt traces %+v: want received = written = %d (the file's spans), nothing refused", c, r.files)
			}
			// Every span the file got, the backend exporter either sent
			// or counted as failed or dropped.
			if c.Sent+c.Lost() != c.Written {
				t.Errorf("receipt traces %+v: sent %d + lost %d != written %d", c, c.Sent, c.Lost(), c.Written)
			}
			// A request that timed out at the collector can still reach
			// a slow backend, and its retry then reaches it again: the
			// backend can hold more than was counted sent, never less.
			if r.backend >= 0 && r.backend < c.Sent {
				t.Errorf("the backend wrote %d spans, the receipt says %d were sent", r.backend, c.Sent)
			}
			if r.backend < 0 && c.Sent != 0 {
				t.Errorf("the receipt says %d spans reached a backend that accepts nothing", c.Sent)
			}
			if c.Lost() > 0 && !strings.Contains(strings.Join(r.rc.Summary(), "\n"), "replay") {
				t.Errorf("the receipt's summary does not point at replay:\n%s", strings.Join(r.rc.Summary(), "\n"))
			}
			// More spans than the backend's queue holds twice over
			// (render.ExportQueueRequests requests of
			// render.BatchMaxItems): the queue overflowed, and its drops
			// were counted. A slow backend that keeps up drops nothing.
			if full := int64(2 * render.ExportQueueRequests * render.BatchMaxItems); kind.name != "slow" && c.Written > full && c.EnqueueFailed == 0 {
				t.Errorf("receipt traces %+v: %d spans while the backend took none, and the export queue dropped none", c, c.Written)
			}
			if _, anon := r.peak(); anon > mem {
				t.Errorf("the collector's anonymous memory reached %.0f MiB, memory_limit_mib is %d", anon, mem)
			}
		})
	}
}

// TestMeasureOutage prints, for each backend behaviour and span rate, what
// the producer was told, what the files, the backend and the receipt hold,
// and the collector's memory over time, with the site's defaults
// (config.Defaults: memory_limit_mib 512, export_timeout_seconds 5,
// shutdown_timeout_seconds 20). It asserts nothing and runs only with
// GYM_OTEL_MEASURE=outage (`make bench` runs it as P8, and reads the
// testenv.OutageSummary line each run prints):
//
//	GYM_OTEL_MEASURE=outage go test -run TestMeasureOutage -v -timeout 60m ./helper/supervise
//
// GYM_OTEL_MEASURE_RATES (default "2000,20000" spans/s),
// GYM_OTEL_MEASURE_SECONDS (default 60, at most 3600) and GYM_OTEL_MEASURE_KINDS (default
// every kind) narrow it.
func TestMeasureOutage(t *testing.T) {
	if os.Getenv("GYM_OTEL_MEASURE") != "outage" {
		t.Skip("set GYM_OTEL_MEASURE=outage to measure")
	}
	rates := []int{2000, 20000}
	if v := os.Getenv("GYM_OTEL_MEASURE_RATES"); v != "" {
		rates = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("GYM_OTEL_MEASURE_RATES: %q is not a rate", f)
			}
			rates = append(rates, n)
		}
	}
	secs := 60
	if v := os.Getenv("GYM_OTEL_MEASURE_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 3600 {
			t.Fatalf("GYM_OTEL_MEASURE_SECONDS: %q, want 1..3600", v)
		}
		secs = n
	}
	want := map[string]bool{}
	for _, k := range strings.Split(os.Getenv("GYM_OTEL_MEASURE_KINDS"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			want[k] = true
		}
	}
	var lines []string
	for _, kind := range outageKinds(2 * time.Second) {
		if len(want) > 0 && !want[kind.name] {
			continue
		}
		for _, rate := range rates {
			t.Run(fmt.Sprintf("%s-%d", kind.name, rate), func(t *testing.T) {
				d := config.Defaults()
				r := runOutage(t, kind, rate, time.Duration(secs)*time.Second, d.MemoryLimitMiB, d.ExportTimeoutSeconds, d.ShutdownTimeoutSeconds)
				fmt.Println(r.summary(secs).Line())
				lines = append(lines, r.line(), "       memory (MiB RSS (anon)): "+r.memSeries(10*time.Second))
				if len(r.rc.Unknown) > 0 {
					lines = append(lines, "       receipt unknown: "+strings.Join(r.rc.Unknown, "; "))
				}
				t.Log(r.line())
			})
		}
	}
	t.Logf("outage runs, %d s each:\n%s", secs, strings.Join(lines, "\n"))
}
