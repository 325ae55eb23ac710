package supervise_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestFirstScrapeAtChosenPhase: the supervisor's configuration gives every
// scrape job (a vLLM stand-in, node_exporter, the job's cgroups) a
// render.PhaseParam, and the real collector scrapes each target at the
// phase that parameter was chosen for: the first `up` point of each target
// lies at that instant mod the interval (Prometheus' offset, computed here
// from the target's labels and URL as Prometheus builds them), and is 1
// (the exporters ignore the parameter). What is asserted is where the
// scrapes fall within the interval, not how fast the collector starts: a
// loop that starts late scrapes one interval later at the same phase. A
// wrong hash would put each target at a random phase (a chance of 1 in 15
// per target to pass).
func TestFirstScrapeAtChosenPhase(t *testing.T) {
	const interval = 15
	vllm := harness.StartVLLM(t)
	node := harness.StartNodeExporter(t)
	s := harness.StartSup(t, harness.Job{JobID: "731", VLLMPort: vllm, NodePort: node, Scrape: interval}).MustReady(t)
	ready := s.Started.Add(s.ReportAfter)
	y, err := os.ReadFile(filepath.Join(s.Out, jobdir.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	host, err := render.PrometheusFQDN()
	if err != nil {
		t.Fatal(err)
	}
	phases := configPhases(t, y, host)
	for _, job := range []string{"gym-vllm/policy", "node"} {
		if _, ok := phases[job]; !ok {
			t.Fatalf("scrape jobs with a %s: %v, want gym-vllm/policy and node among them", render.PhaseParam, phases)
		}
	}
	var first map[string]otlptest.NumberPoint
	harness.WaitFor(t, time.Duration(2*interval+10)*time.Second, "a sample of every target", func() bool {
		first = firstUpPoints(s.Out)
		return len(first) >= len(phases)
	})
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	iv := time.Duration(interval) * time.Second
	for job, phase := range phases {
		p, ok := first[job]
		if !ok {
			t.Errorf("%s: no up point", job)
			continue
		}
		if p.Value() != 1 {
			t.Errorf("%s: first up %v, want 1 (does the exporter refuse %s?)", job, p.Value(), render.PhaseParam)
		}
		// Where in the interval the scrape came, relative to the phase
		// (between -interval/2 and +interval/2): Prometheus stamps the
		// scrape's start, a timer's delay after the phase (the timer runs
		// on the monotonic clock, the phase on the wall clock: a slewed
		// wall clock puts it a little before).
		late := (time.Duration(p.At().UnixNano()%int64(iv)) - phase + iv) % iv
		if late > iv/2 {
			late -= iv
		}
		if late < -50*time.Millisecond || late > time.Second {
			t.Errorf("%s: scraped %v after its phase %v within the interval, want the phase (-50 ms to +1 s: clock slew, timer delay)", job, late, phase)
		}
		t.Logf("%s: phase %v, scrape %v after it; ready to first sample %.2f s", job, phase, late, p.At().Sub(ready).Seconds())
	}
}

// configPhases returns, per scrape job of collector configuration y with a
// render.PhaseParam, Prometheus' phase of its one static target on host:
// the labels Prometheus gives a static target (scrape.PopulateLabels with
// the receiver's defaults), stated here apart from render's own list.
func configPhases(t *testing.T, y []byte, host string) map[string]time.Duration {
	t.Helper()
	var doc struct {
		Receivers struct {
			Prometheus struct {
				Config struct {
					ScrapeConfigs []struct {
						JobName        string              `yaml:"job_name"`
						ScrapeInterval string              `yaml:"scrape_interval"`
						ScrapeTimeout  string              `yaml:"scrape_timeout"`
						MetricsPath    string              `yaml:"metrics_path"`
						Params         map[string][]string `yaml:"params"`
						StaticConfigs  []struct {
							Targets []string          `yaml:"targets"`
							Labels  map[string]string `yaml:"labels"`
						} `yaml:"static_configs"`
					} `yaml:"scrape_configs"`
				} `yaml:"config"`
			} `yaml:"prometheus"`
		} `yaml:"receivers"`
	}
	if err := yaml.Unmarshal(y, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Duration{}
	for _, sc := range doc.Receivers.Prometheus.Config.ScrapeConfigs {
		v := sc.Params[render.PhaseParam]
		if len(v) != 1 || len(sc.StaticConfigs) != 1 || len(sc.StaticConfigs[0].Targets) != 1 {
			t.Errorf("scrape job %s: params %v, static_configs %v: want one %s and one target", sc.JobName, sc.Params, sc.StaticConfigs, render.PhaseParam)
			continue
		}
		iv, err := time.ParseDuration(sc.ScrapeInterval)
		if err != nil {
			t.Fatal(err)
		}
		addr := sc.StaticConfigs[0].Targets[0]
		lbls := map[string]string{
			"__address__":                            addr,
			"__always_scrape_classic_histograms__":   "false",
			"__convert_classic_histograms_to_nhcb__": "false",
			"__metrics_path__":                       sc.MetricsPath,
			"__param_" + render.PhaseParam:           v[0],
			"__scheme__":                             "http",
			"__scrape_interval__":                    sc.ScrapeInterval,
			"__scrape_native_histograms__":           "false",
			"__scrape_timeout__":                     sc.ScrapeTimeout,
			"job":                                    sc.JobName,
		}
		for k, l := range sc.StaticConfigs[0].Labels {
			lbls[k] = l
		}
		url := "http://" + addr + sc.MetricsPath + "?" + render.PhaseParam + "=" + v[0]
		out[sc.JobName] = render.TargetPhase(lbls, url, render.OffsetSeed(host), iv)
	}
	return out
}

// firstUpPoints returns, per scrape job (service.name.override), its
// earliest `up` point in dir/metrics.jsonl.
func firstUpPoints(dir string) map[string]otlptest.NumberPoint {
	d, err := otlptest.Read(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return nil // a line being written: try again
	}
	out := map[string]otlptest.NumberPoint{}
	for _, m := range d.Named("up") {
		name, _ := m.Resource.Str("service.name.override")
		if m.Gauge == nil {
			continue
		}
		for _, dp := range m.Gauge.DataPoints {
			if old, ok := out[name]; !ok || dp.At().Before(old.At()) {
				out[name] = dp
			}
		}
	}
	return out
}
