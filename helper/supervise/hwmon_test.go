package supervise_test

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestHwmonScraped: a supervisor told to read hwmon (launch.EnvHostPower,
// as the plugin's prolog names it) finds the power meter of a hwmon tree
// the test writes (the tests' build, tag gymotel_hwmon_test: the tree is
// compiled in, in place of /sys/class/hwmon) at a constant 215 W, beside
// an amdgpu chip's 95 W sensor, and the real collector scrapes its
// gym_otel_host_power_watts into metrics.jsonl at 1 s for over 5 s. The
// GPU's sensor is never served; inspect integrates the meter's power over
// the node's sampled run to within 2 % of 215 W times the run, trusted,
// from hwmon power.
func TestHwmonScraped(t *testing.T) {
	testenv.Collector(t)
	const watts = 215.0
	tree := t.TempDir()
	for rel, v := range map[string]string{
		"hwmon0/name": "amdgpu", "hwmon0/power1_average": "95000000",
		"hwmon3/device/name": "power_meter", "hwmon3/device/power1_average": "215000000", "hwmon3/device/power1_average_interval": "1000",
	} {
		p := filepath.Join(tree, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	cli := filepath.Join(t.TempDir(), "gym-otel-spank")
	build := exec.Command("go", "build", "-tags", "gymotel_hwmon_test",
		"-ldflags", "-X github.com/gym-otel-spank/gym-otel-spank/helper/supervise.testHwmonRoot="+tree, "-o", cli, "./cmd/gym-otel-spank")
	build.Dir = testenv.Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags gymotel_hwmon_test: %v\n%s", err, out)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8484", Scrape: 1, CLI: cli, Env: []string{launch.EnvHostPower + "=" + launch.HostPowerHwmon}})
	s.MustReady(t)
	harness.WaitMetricNames(t, s, 15*time.Second, vocab.HostPowerWatts)
	time.Sleep(5500 * time.Millisecond)
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	d, err := otlptest.Read(filepath.Join(s.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	points := 0
	for _, m := range d.Metrics {
		if m.Name != vocab.HostPowerWatts {
			continue
		}
		if m.Gauge == nil {
			t.Fatalf("%s is not a gauge", m.Name)
		}
		for _, p := range m.Gauge.DataPoints {
			chip, _ := p.Attributes.Str("chip")
			hw, _ := p.Attributes.Str("hwmon")
			sensor, _ := p.Attributes.Str("sensor")
			if chip != "power_meter" || hw != "hwmon3" || sensor != "power1" || p.Value() != watts {
				t.Errorf("point %s/%s/%s %v W: want power_meter/hwmon3/power1 215 W alone", chip, hw, sensor, p.Value())
			}
			points++
		}
	}
	if points < 5 {
		t.Errorf("%d points of %s: want a reading a second for over 5 s", points, vocab.HostPowerWatts)
	}
	if out := s.Proc.Out.String(); !strings.Contains(out, "not read (a GPU's is dcgm-exporter's; other chips are parts of the node): amdgpu hwmon0 power1_average") ||
		!strings.Contains(out, "reading power_meter hwmon3 power1_average (averaged over 1000 ms)") {
		t.Errorf("the supervisor's log does not name the meter read and the GPU's sensor not read:\n%s", out)
	}
	r, err := inspect.Build(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	var run *inspect.HostEnergy
	for i, h := range r.HostEnergy {
		if h.Step == "" {
			run = &r.HostEnergy[i]
		}
	}
	if run == nil || run.Start == nil || run.End == nil {
		t.Fatalf("no host run row: %+v", r.HostEnergy)
	}
	window := run.End.Sub(*run.Start).Seconds()
	want := watts * window
	t.Logf("%d scrapes; inspect: %.3f J over %.3f s (%.3f W), want %.0f W x %.3f s = %.3f J: %.3f %% off; max gap %v s; %s; %v",
		points, float64(run.Joules), window, float64(run.Watts), watts, window, want, 100*(float64(run.Joules)-want)/want, run.MaxGapSeconds, run.Source, run.Verdict.Why)
	if window < 5 || !run.Joules.Known() || math.Abs(float64(run.Joules)-want) > 0.02*want || run.Source != inspect.HostSourceHwmon ||
		run.Attribution != inspect.HostAttributionMeter || !run.Verdict.Trusted || strings.Join(run.Zones, ",") != "power_meter/hwmon3/power1" {
		t.Errorf("run row %+v: want %.1f J (2 %%) over 5 s or more, trusted, from hwmon power", *run, want)
	}
}
