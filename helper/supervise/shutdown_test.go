package supervise_test

// The shutdown bound at the site's defaults holds the backend exporters'
// last requests when the backend hangs: the collector shuts down by
// itself, and the receipt is final. And the recovery burst after an
// outage (measured only).

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
)

var stoppedRE = regexp.MustCompile(`collector stopped in (\d+) ms \(clean: (true|false)\)`)

// TestCollectorShutdownBoundAtDefaults: otel.delivery: collector (its
// backend exporters), export_timeout_seconds and
// shutdown_timeout_seconds at their defaults, a backend that accepts
// connections and never answers, spans at a high rate until the drain:
// every exporter still has requests in flight when the collector is told
// to stop, and it stops cleanly within shutdown_timeout_seconds, so the
// receipt has final figures that match traces.jsonl. (At the old default
// of 10 s the three exporters' last requests, 5 s each one after another,
// did not fit: the collector was killed and the receipt had only lower
// bounds.)
func TestCollectorShutdownBoundAtDefaults(t *testing.T) {
	t.Parallel()
	d := config.Defaults()
	if d.ShutdownTimeoutSeconds < d.MinShutdownSeconds() {
		t.Fatalf("the defaults do not validate: shutdown %d < %d", d.ShutdownTimeoutSeconds, d.MinShutdownSeconds())
	}
	hang := outageKinds(0)[0]
	r := runLoad(t, hang, 5000, 10*time.Second, harness.Job{JobID: "2525", Memory: d.MemoryLimitMiB, Export: d.ExportTimeoutSeconds, Shutdown: d.ShutdownTimeoutSeconds})
	t.Log(r.line())
	m := stoppedRE.FindStringSubmatch(r.supLog)
	if m == nil {
		t.Fatalf("the supervisor did not say how the collector stopped:\n%s", r.supLog)
	}
	ms, _ := strconv.Atoi(m[1])
	t.Logf("the collector stopped in %d ms (clean: %s); bound %d s, export timeout %d s x %d exporters",
		ms, m[2], d.ShutdownTimeoutSeconds, d.ExportTimeoutSeconds, d.BackendExporters())
	if m[2] != "true" || r.drainErr != nil {
		t.Fatalf("the collector did not shut down cleanly within %d s (%d ms): %v", d.ShutdownTimeoutSeconds, ms, r.drainErr)
	}
	if !r.rc.Complete() {
		t.Errorf("receipt basis %q, want final: %v", r.rc.Basis, r.rc.Unknown)
	}
	c := r.rc.Signals["traces"]
	if r.load.Failed != 0 || c.Written != r.files || c.Sent != 0 || c.Lost() != c.Written {
		t.Errorf("receipt traces %+v, producer refused %d, traces.jsonl %d: want written = file, all lost, none sent", c, r.load.Failed, r.files)
	}
	// The exporters did hold requests at the stop: a hung backend makes
	// the shutdown wait for them (at least one export timeout).
	if ms < 1000*d.ExportTimeoutSeconds/2 {
		t.Logf("note: the stop took %d ms, less than half an export timeout: few requests were in flight", ms)
	}
}

// TestMeasureRecoveryBurst measures what an idle collector (the scrape
// targets of a node at the default interval, no spans) sends when its
// backend comes back after an outage: the requests the backend receives
// in the first seconds (GYM_OTEL_MEASURE=burst; GYM_OTEL_MEASURE_SECONDS
// is the outage, default 90).
func TestMeasureRecoveryBurst(t *testing.T) {
	if os.Getenv("GYM_OTEL_MEASURE") != "burst" {
		t.Skip("set GYM_OTEL_MEASURE=burst to measure")
	}
	secs := 90
	if v := os.Getenv("GYM_OTEL_MEASURE_SECONDS"); v != "" {
		secs, _ = strconv.Atoi(v)
	}
	d := config.Defaults()
	port := harness.FreePort(t)
	token := "burst-" + harness.RandHex(6)
	s := harness.StartSup(t, harness.Job{JobID: "2626", Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Token: token,
		VLLMPort: harness.StartVLLM(t), DCGMPort: harness.StartDCGM(t), NodePort: harness.StartNodeExporter(t),
		Scrape: d.ScrapeIntervalSeconds, Export: d.ExportTimeoutSeconds, Shutdown: d.ShutdownTimeoutSeconds, Site: "  delivery: collector\n"}).MustReady(t)
	t.Logf("backend down for %d s (nothing listens on %d)", secs, port)
	time.Sleep(time.Duration(secs) * time.Second)
	up := time.Now()
	be := harness.StartBackendOn(t, token, port)
	t.Logf("backend up after %v", time.Since(up).Round(time.Millisecond))
	var lines []string
	for _, at := range []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second} {
		time.Sleep(time.Until(up.Add(at)))
		lines = append(lines, fmt.Sprintf("%v after it came back: %d requests", at, requestsIn(be.Dir)))
	}
	s.Drain(t, time.Minute)
	be.Stop(t)
	t.Logf("requests the backend received (lines of its jsonl files, one per request):\n%s", strings.Join(lines, "\n"))
}

// requestsIn counts the lines of a backend's jsonl files: its file
// exporter writes one line per request it received.
func requestsIn(dir string) int {
	n := 0
	for _, sig := range []string{"traces", "metrics", "logs"} {
		f, err := os.Open(filepath.Join(dir, sig+".jsonl"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<28)
		for sc.Scan() {
			n++
		}
		f.Close()
	}
	return n
}
