package inspect

import (
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// freePort is a TCP port on 127.0.0.1 nothing listens on (now).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs argv until the test ends (SIGTERM, then waits).
func start(t *testing.T, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// scrapeStandins runs the real collector scraping the dcgm stand-in (GPUs
// 0 and 1, constant power; with energy its energy counter too) and a vLLM
// stand-in every interval, marking the dcgm series as the job's as the
// node's collector does, until metrics.jsonl holds n scrapes of GPU 0's
// power; it returns the job dir and those scrapes.
func scrapeStandins(t *testing.T, interval string, energy bool, n int) (string, [][2]float64) {
	t.Helper()
	bin := testenv.Collector(t)
	dcgm, vllm := testenv.Standin(t, "dcgm-standin"), testenv.Standin(t, "vllm-standin")
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pd, pv := freePort(t), freePort(t)
	argv := []string{dcgm, "--port", strconv.Itoa(pd), "--gpus", "0,1", "--constant", "--hostname", "gn1"}
	if energy {
		argv = append(argv, "--energy")
	}
	start(t, argv...)
	start(t, vllm, "--port", strconv.Itoa(pv))
	metrics := filepath.Join(dir, "metrics.jsonl")
	cfg := fmt.Sprintf(`receivers:
  prometheus:
    config:
      scrape_configs:
        - {job_name: dcgm, scrape_interval: %[1]s, scrape_timeout: 1s, static_configs: [{targets: ["127.0.0.1:%[2]d"]}]}
        - {job_name: gym-vllm/policy, scrape_interval: %[1]s, scrape_timeout: 1s, static_configs: [{targets: ["127.0.0.1:%[3]d"]}]}
processors:
  transform/dcgm:
    metric_statements:
      - context: datapoint
        statements:
          - set(attributes["gpu_attribution"], "job") where resource.attributes["service.name"] == "dcgm" and attributes["gpu"] != nil
  transform/names:
    metric_statements:
      - context: metric
        statements:
          - replace_pattern(metric.name, "^([A-Za-z_][A-Za-z0-9_]*):", "$${1}_")
  transform/identity:
    metric_statements:
      - context: resource
        statements:
          - set(attributes["service.name.override"], attributes["service.name"])
          - set(attributes["host.name"], "gn1")
exporters:
  file/metrics: {path: %[4]q}
service:
  telemetry: {metrics: {level: none}}
  pipelines:
    metrics: {receivers: [prometheus], processors: [transform/dcgm, transform/names, transform/identity], exporters: [file/metrics]}
`, interval, pd, pv, metrics)
	cfgPath := filepath.Join(job, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	col := exec.Command(bin, "--config", cfgPath)
	col.Stdout, col.Stderr = os.Stderr, os.Stderr
	if err := col.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = col.Wait(); close(done) }()
	stop := func() {
		_ = col.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = col.Process.Kill()
			<-done
		}
	}
	defer stop()
	var power [][2]float64
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if _, err := os.Stat(metrics); err == nil {
			power = seriesPoints(t, metrics, mPower, "0")
			if len(power) >= n {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scrapes of GPU 0's power in 90 s, want %d", len(power), n)
		}
	}
	// The collector writes what it holds before it exits.
	stop()
	return job, seriesPoints(t, metrics, mPower, "0")
}

// TestStepEnergyLiveStandin: the real collector scrapes the dcgm stand-in
// (dcgm-exporter's Prometheus text, power in W and, with --energy, the
// energy counter in mJ; GPU 0 at 127.5 W, GPU 1 at 138.5 W) and a vLLM
// stand-in; a step's window lies between the second and the fourth scrape.
// Every second with the counter: trusted, and the joules between the
// bracketing scrapes within 2 % of 266 W times their time apart. Every
// 4 s with power only: the same within 2 % (the power is constant), not
// trusted: the gap.
func TestStepEnergyLiveStandin(t *testing.T) {
	for _, c := range []struct {
		name     string
		interval string
		energy   bool
		reason   string
	}{{"counter every 1s", "1s", true, ""}, {"power every 4s", "4s", false, ReasonGap}} {
		t.Run(c.name, func(t *testing.T) {
			job, power := scrapeStandins(t, c.interval, c.energy, 5)
			off := func(ms float64) int64 { return int64(ms) - ns(0)/1e6 }
			t0 := off((power[1][0] + power[2][0]) / 2)
			t1 := off((power[3][0] + power[4][0]) / 2)
			if err := os.WriteFile(filepath.Join(job, "otel", "traces.jsonl"), []byte(steps("gn1", nil, []int64{t0, t1})), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := Build(job)
			if err != nil {
				t.Fatal(err)
			}
			s := stepOf(t, r, "gn1", "0")
			want := 266 * (power[4][0] - power[1][0]) / 1000
			t.Logf("%s: %.1f J over %.2f s (bracket %.2f s, largest gap %.2f s), %.1f J expected; %v", c.name,
				float64(s.Joules), float64(s.WindowSeconds), float64(s.BracketSeconds), float64(s.MaxGapSeconds), want, s.Verdict)
			if !s.Joules.Known() || math.Abs(float64(s.Joules)-want) > 0.02*want || len(s.GPUs) != 2 || s.MatchedBy != "UUID" {
				t.Errorf("step 0: %+v; want %.1f J within 2%%", s, want)
			}
			if c.energy != (s.Source == SourceEnergyCounter) {
				t.Errorf("source %q", s.Source)
			}
			switch {
			case c.reason == "" && !s.Verdict.Trusted:
				t.Errorf("verdict %+v, want trusted", s.Verdict)
			case c.reason != "" && (s.Verdict.Trusted || len(s.Verdict.Why) != 1 || s.Verdict.Why[0][:len(c.reason)] != c.reason):
				t.Errorf("verdict %+v, want %q", s.Verdict, c.reason)
			}
			ro := roleOfReport(t, r, "policy", "0")
			if !ro.GenerationTokens.Known() || ro.GenerationTokens <= 0 || !within1(ro.JoulesPer1kTokens, float64(s.Joules/ro.GenerationTokens*1000), 1e-6) {
				t.Errorf("policy %+v", ro)
			}
		})
	}
}
