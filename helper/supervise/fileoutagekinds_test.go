package supervise_test

// Delivery from the files (the default) under each of P8's backend
// behaviours, through the whole job and its drain: the backend's copy
// after the job, and after one replay once a healthy backend is back on
// the same endpoint.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/delivery"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// fileKindRun runs one job with delivery from the files at rate spans/s
// for dur against kind's backend, which misbehaves through the job and
// its drain; then ends the behaviour, starts a healthy backend on the
// same port and, when the receipt says the backend's copy is incomplete,
// runs one `replay` of the node dir. It returns the summary: the files'
// items, the backend's after the job and after the replay, the
// duplicates against the checkpoint's bound, the replay's time from the
// backend's return, the peak memory of the supervisor and the collector.
func fileKindRun(t *testing.T, kind outageKind, rate int, dur time.Duration) testenv.FileOutageSummary {
	t.Helper()
	token := "fkind-" + harness.RandHex(6)
	ep, behind, stop := kind.start(t, token)
	// The site's defaults (config.Defaults: export_timeout_seconds 5,
	// memory_limit_mib 512, shutdown_timeout_seconds 20), as P8's
	// collector rows.
	def := config.Defaults()
	s, rc, peak, collPeak, drain := fileJobOf(t, harness.Job{JobID: "3838", Endpoint: ep, Token: token, Site: "  delivery: files\n",
		Memory: def.MemoryLimitMiB, Export: def.ExportTimeoutSeconds, Shutdown: def.ShutdownTimeoutSeconds}, rate, dur, nil)
	d := rc.Delivery
	sum := testenv.FileOutageSummary{Kind: kind.name, Rate: rate, JobSeconds: int(dur / time.Second), OutageSeconds: int(dur / time.Second),
		DuplicatesBound: d.DuplicatesBound, Complete: d.Complete(), CatchUp: -1, PeakSupervisor: float64(peak) / 1024,
		PeakCollector: float64(collPeak) / 1024, MemoryLimit: config.Defaults().MemoryLimitMiB, Drain: drain.Seconds()}
	var steps []loadResult
	if data, err := os.ReadFile(filepath.Join(s.Dir, "loadgen.json")); err == nil && json.Unmarshal(data, &steps) == nil && len(steps) == 1 {
		sum.Accepted, sum.Refused = steps[0].OK, steps[0].Failed
	}
	for _, l := range strings.Split(s.Output(), "\n") {
		if strings.Contains(l, "delivery") {
			t.Log(l)
		}
	}
	if len(d.CatchUps) > 0 {
		c := d.CatchUps[0]
		sum.LateItems, sum.Lag = c.Items, c.Lag().Seconds()
	}
	// The behaviour ends; the backend that stood behind it (slow) has
	// what it got through during the job.
	stop()
	var dirs []string
	if behind != nil {
		behind.Stop(t)
		dirs = append(dirs, behind.Dir)
	}
	for _, sig := range []string{"traces", "metrics", "logs"} {
		n, _ := fileItems(t, sig, dirs...)
		sum.BackendAfterJob += n
	}
	if !d.Complete() {
		u, err := url.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(u.Port())
		back := time.Now()
		be := harness.StartBackendOn(t, token, port)
		cmd := exec.Command(harness.CLI(t), "replay", "--endpoint", ep, "--token-env", "OTEL_TOKEN", s.Out)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "OTEL_TOKEN=" + token}
		out, rerr := cmd.CombinedOutput()
		sum.ReplaySeconds = time.Since(back).Seconds()
		sum.Replayed = true
		t.Logf("replay (%v):\n%s", rerr, out)
		if m := regexp.MustCompile(`sending (\d+) items`).FindSubmatch(out); m != nil {
			sum.ReplayItems, _ = strconv.ParseInt(string(m[1]), 10, 64)
		}
		be.Stop(t)
		dirs = append(dirs, be.Dir)
		cp, err := delivery.ReadCheckpoint(s.Out)
		if err != nil {
			t.Fatal(err)
		}
		after := delivery.Totals(cp, nil)
		sum.DuplicatesBound = after.DuplicatesBound
		if rerr != nil {
			t.Errorf("replay: %v", rerr)
		}
	}
	for _, sig := range []string{"traces", "metrics", "logs"} {
		want, wantSpans := fileItems(t, sig, s.Out)
		got, gotSpans := fileItems(t, sig, dirs...)
		sum.Files += want
		sum.Backend += got
		for id := range wantSpans {
			if gotSpans[id] == 0 {
				sum.Missing++
			}
		}
	}
	sum.Extra = sum.Backend - sum.Files
	return sum
}

// TestMeasureFileDeliveryOutageKinds measures delivery from the files
// (otel.delivery: files, the default) under each backend behaviour of
// TestMeasureOutage (hang, refuse, 429, 503, slow; `make bench` row P8's
// rows "delivery files"), the behaviour lasting through the job and its
// drain, with the site's defaults: after the job a healthy backend comes
// back on the same endpoint and one `replay` sends what the checkpoint
// says the backend has not acknowledged. It prints a
// testenv.FileOutageSummary line per kind and fails when the backend then
// lacks an item of the files or holds more duplicates than the
// checkpoint's bound. It runs only with GYM_OTEL_MEASURE=outage-files:
//
//	GYM_OTEL_MEASURE=outage-files go test -run TestMeasureFileDeliveryOutageKinds -v -timeout 60m ./helper/supervise
//
// GYM_OTEL_MEASURE_RATES (default 20000 spans/s; the first is used),
// GYM_OTEL_MEASURE_SECONDS (default 60, at most 3600) and
// GYM_OTEL_MEASURE_KINDS (default every kind) narrow it.
func TestMeasureFileDeliveryOutageKinds(t *testing.T) {
	if os.Getenv("GYM_OTEL_MEASURE") != "outage-files" {
		t.Skip("set GYM_OTEL_MEASURE=outage-files to measure")
	}
	rate, secs := 20000, 60
	if v := os.Getenv("GYM_OTEL_MEASURE_RATES"); v != "" {
		n, err := strconv.Atoi(strings.TrimSpace(strings.Split(v, ",")[0]))
		if err != nil || n < 1 {
			t.Fatalf("GYM_OTEL_MEASURE_RATES: %q is not a rate", v)
		}
		rate = n
	}
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
	for _, kind := range outageKinds(2 * time.Second) {
		if len(want) > 0 && !want[kind.name] {
			continue
		}
		t.Run(kind.name, func(t *testing.T) {
			sum := fileKindRun(t, kind, rate, time.Duration(secs)*time.Second)
			fmt.Println(sum.Line())
			t.Log(sum.Line())
			if sum.Missing > 0 || sum.Backend < sum.Files || sum.Extra > sum.DuplicatesBound {
				t.Errorf("the backend's copy after the job%s: %+v", map[bool]string{true: " and one replay"}[sum.Replayed], sum)
			}
		})
	}
}
