package render

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// TestTargetPhaseMatchesPrometheus: the phases computed here equal those
// Prometheus v0.314.0's own scrape package gives the same targets: its
// scrape.PopulateLabels and Target.URL on the scrape configuration loaded
// by its config.Load, then Target.hash's FNV of "%016d" of the labels'
// Hash() and the URL, xor the seed of setOffsetSeed, mod the interval. The
// expected values were printed by a program doing exactly that; the
// long label value takes the long branch of the label encoding.
func TestTargetPhaseMatchesPrometheus(t *testing.T) {
	long := strings.Repeat("x", 300)
	targets := []scrapeTarget{
		{job: "gym-vllm/policy", interval: 15 * time.Second, timeout: 10 * time.Second, address: "localhost:17851", metricsPath: "/metrics",
			labels: [][2]string{{"instance", "gn1:17851"}, {"gym_service", "policy"}, {"role", "policy"}}, phaseParamValue: "42"},
		{job: "node", interval: 90 * time.Second, timeout: 10 * time.Second, address: "localhost:9100", metricsPath: "/metrics",
			labels: [][2]string{{"instance", "gn2.cluster.example:9100"}, {"gym_service", long}, {"role", "r"}}, phaseParamValue: "7"},
		{job: "cgroup", interval: 5 * time.Second, timeout: 5 * time.Second, address: "localhost:41006", metricsPath: "/metrics",
			labels: [][2]string{{"instance", "gn1:41006"}}},
	}
	want := []struct {
		labelsHash uint64
		url        string
		phase      map[string]time.Duration // per host
	}{
		{12081899522591714830, "http://localhost:17851/metrics?gym_otel_phase=42", map[string]time.Duration{"gn1.example.org": 14465754862, "localhost": 2836839311}},
		{17218673578316797424, "http://localhost:9100/metrics?gym_otel_phase=7", map[string]time.Duration{"gn1.example.org": 18321415936, "localhost": 75873346145}},
		{408767145950376404, "http://localhost:41006/metrics", map[string]time.Duration{"gn1.example.org": 1873123284, "localhost": 3546243765}},
	}
	for i, tg := range targets {
		if h := labelsHash(tg.targetLabels()); h != want[i].labelsHash {
			t.Errorf("%s: labels hash %d, Prometheus %d (labels %v)", tg.job, h, want[i].labelsHash, tg.targetLabels())
		}
		if u := tg.url(); u != want[i].url {
			t.Errorf("%s: URL %s, Prometheus %s", tg.job, u, want[i].url)
		}
		for host, p := range want[i].phase {
			if got := tg.phase(OffsetSeed(host)); got != p {
				t.Errorf("%s on %s: phase %d ns, Prometheus %d ns", tg.job, host, got, p)
			}
		}
	}
}

// TestChoosePhase: the value chosen puts the phase within PhaseWindow
// after the instant asked for, for intervals from 1 s to an hour.
func TestChoosePhase(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	for _, iv := range []int{1, 5, 15, 60, 90, 3600} {
		tg := scrapeTarget{job: "j", interval: time.Duration(iv) * time.Second, timeout: time.Second, address: "localhost:1", metricsPath: "/metrics",
			labels: [][2]string{{"instance", "n:1"}}}
		v, wait := choosePhase(tg, FirstScrape{At: at, Host: "n"})
		if wait >= PhaseWindow {
			t.Errorf("interval %d s: best wait %v, want < %v", iv, wait, PhaseWindow)
		}
		tg.phaseParamValue = v
		got := (tg.phase(OffsetSeed("n")) - time.Duration(at.UnixNano()%int64(tg.interval)) + tg.interval) % tg.interval
		if got != wait {
			t.Errorf("interval %d s: value %q gives wait %v, choosePhase said %v", iv, v, got, wait)
		}
	}
}

// TestPromDuration: promDuration writes every duration as Prometheus'
// model.Duration does, the scrape jobs' intervals and timeouts among them.
func TestPromDuration(t *testing.T) {
	ds := []time.Duration{0, time.Millisecond, 999 * time.Millisecond, time.Second, 1500 * time.Millisecond,
		5 * time.Second, 15 * time.Second, 59 * time.Second, time.Minute, 90 * time.Second, time.Hour,
		time.Hour + time.Second, 24 * time.Hour, 7 * 24 * time.Hour, 8 * 24 * time.Hour, 90 * 24 * time.Hour,
		365 * 24 * time.Hour, 366 * 24 * time.Hour, 2 * 365 * 24 * time.Hour, -time.Second, -90 * time.Second,
		time.Microsecond, 1234567 * time.Microsecond}
	for s := 1; s <= 7200; s += 7 {
		ds = append(ds, time.Duration(s)*time.Second)
	}
	for _, d := range ds {
		if got, want := promDuration(d), model.Duration(d).String(); got != want {
			t.Errorf("promDuration(%v) = %q, model.Duration: %q", d, got, want)
		}
	}
}

// TestPromLabelNames: the target labels' names are Prometheus' own.
func TestPromLabelNames(t *testing.T) {
	for got, want := range map[string]model.LabelName{
		promAddressLabel: model.AddressLabel, promJobLabel: model.JobLabel,
		promScrapeIntervalLabel: model.ScrapeIntervalLabel, promScrapeTimeoutLabel: model.ScrapeTimeoutLabel,
		promMetricsPathLabel: model.MetricsPathLabel, promSchemeLabel: model.SchemeLabel,
		promParamLabelPrefix: model.ParamLabelPrefix, promInstanceLabel: model.InstanceLabel,
	} {
		if got != string(want) {
			t.Errorf("label %q, Prometheus' is %q", got, want)
		}
	}
}
