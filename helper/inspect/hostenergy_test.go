package inspect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// hostPt is a line of the cgroup readings' host energy counter on node:
// zone's sum at ms (J).
func hostLine(node, zone string, ms int64, j float64) string {
	return metricsLine(node, "cgroup", fmt.Sprintf(`{"name":%q,"sum":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}],"aggregationTemporality":2,"isMonotonic":true}}`,
		mHostEnergy, sAttr("zone", zone), ns(0)+ms*1e6, j))
}

// hostCurve is node's zones drawing w W each from ms 0, sampled at ms;
// reset, when > 0, starts the zones' sums again from 0 at that ms.
func hostCurve(node string, w map[string]float64, reset int64, ms ...int64) string {
	var b strings.Builder
	for _, t := range ms {
		for z, p := range w {
			v := p * float64(t) / 1000
			if reset > 0 && t >= reset {
				v = p * float64(t-reset) / 1000
			}
			b.WriteString(hostLine(node, z, t, v))
		}
	}
	return b.String()
}

func hostOf(t *testing.T, r *Report, node, step string) HostEnergy {
	t.Helper()
	for _, h := range r.HostEnergy {
		if h.Node == node && h.Step == step {
			return h
		}
	}
	t.Fatalf("no host row %s %q in %+v", node, step, r.HostEnergy)
	return HostEnergy{}
}

// TestHostEnergy: gn1 serves its two packages (120 W and 80 W), their dram
// (10 W) and core subzones and psys every 2 s; gn2 has GPUs and steps but
// no host energy. gn1's batch script (2.5 s to 17.5 s) and step 0 (5 s to
// 13 s) get the packages and dram summed (the core subzone and psys
// listed, not added), the node's run its whole sampled span; gn2's row
// says it has no host power; a reset of the sums fails the verdict.
func TestHostEnergy(t *testing.T) {
	sec := every(0, 20000, 1000)
	two := every(0, 20000, 2000)
	zones := map[string]float64{"package-0": 120, "package-1": 80, "package-0/dram": 10, "package-0/core": 60, "psys": 400}
	job := stepJob(t, map[string]string{
		"gn1": steps("gn1", []int64{2500, 17500}, []int64{5000, 13000}),
		"gn2": steps("gn2", nil, []int64{5000, 13000}),
	}, []gpuCurve{constant("gn1", 0, 300, true, sec...), constant("gn2", 0, 100, true, sec...)},
		map[string]string{"gn1": hostCurve("gn1", zones, 0, two...)})
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	// The batch script's window, 15 s, between the samples at 2 s and 18 s:
	// 16 s x 210 W; the samples inside it (4 s to 16 s) bound it below.
	b := hostOf(t, r, "gn1", "batch")
	if !within1(b.Joules, 16*210, 1e-6) || !within1(b.ErrorJoules, 4*210, 1e-6) || !within1(b.BracketSeconds, 1, 1e-9) || !within1(b.Watts, 210, 1e-6) ||
		strings.Join(b.Zones, ",") != "package-0,package-0/dram,package-1" || strings.Join(b.NotSummed, ",") != "package-0/core,psys" ||
		b.Attribution != HostAttributionNode || !b.Verdict.Trusted {
		t.Errorf("batch on gn1: %+v", b)
	}
	// Step 0 (5 s to 13 s) between the samples at 4 s and 14 s.
	if s0 := hostOf(t, r, "gn1", "0"); !within1(s0.Joules, 10*210, 1e-6) || !within1(s0.ErrorJoules, 4*210, 1e-9) || !s0.Verdict.Trusted {
		t.Errorf("step 0 on gn1: %+v", s0)
	}
	if run := hostOf(t, r, "gn1", ""); !within1(run.Joules, 20*210, 1e-6) || run.Start == nil || run.End == nil || !run.Verdict.Trusted {
		t.Errorf("run on gn1: %+v", run)
	}
	n2 := hostOf(t, r, "gn2", "")
	if n2.Joules.Known() || n2.Verdict.Trusted || len(n2.Verdict.Why) != 1 || !strings.HasPrefix(n2.Verdict.Why[0], ReasonNoHostPower+": gn2: ") {
		t.Errorf("gn2 without host power: %+v", n2)
	}
	for _, h := range r.HostEnergy {
		if h.Node == "gn2" && h.Step != "" {
			t.Errorf("gn2 has a step row without host power: %+v", h)
		}
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	sec2 := flat(textSections(text.String(), "host energy"))
	for _, want := range []string{"gn1 step batch 3360.0 J (210.0 W), the window's own 2520.0 to 3360.0 J (samples 1.00 s beyond it), package-0 + package-0/dram + package-1; trusted",
		"gn2 run -; NOT TRUSTED: " + ReasonNoHostPower + ": gn2: its supervisor sent no"} {
		if !strings.Contains(sec2, want) {
			t.Errorf("text lacks %q:\n%s", want, sec2)
		}
	}

	var page bytes.Buffer
	if err := r.WriteHTML(&page, nil); err != nil {
		t.Fatal(err)
	}
	if h := page.String(); !strings.Contains(h, "Host energy (RAPL; the node") || !strings.Contains(h, "3360.0") || !strings.Contains(h, "no host power on the node: gn2") {
		t.Errorf("the HTML has no host energy table with gn1's batch and gn2's verdict")
	}

	// The supervisor's sums started again at 9 s: step 0 (5 s to 13 s) is
	// not trusted; the batch window neither.
	job = stepJob(t, map[string]string{"gn1": steps("gn1", []int64{2500, 17500}, []int64{5000, 13000})},
		[]gpuCurve{constant("gn1", 0, 300, true, sec...)}, map[string]string{"gn1": hostCurve("gn1", map[string]float64{"package-0": 100}, 9000, two...)})
	if r, err = Build(job); err != nil {
		t.Fatal(err)
	}
	if s0 := hostOf(t, r, "gn1", "0"); s0.Verdict.Trusted || !strings.HasPrefix(strings.Join(s0.Verdict.Why, "|"), ReasonReset+": gn1 host zones package-0") {
		t.Errorf("step 0 over a reset: %+v", s0)
	}

	// The sums' start at 1.5 s (the supervisor's first read): the batch
	// script (from 2.5 s) is bracketed from it although the first scrape
	// is at 3 s: 1.5 s to 18 s at 100 W.
	late := every(3000, 20000, 1000)
	start := metricsLine("gn1", "cgroup", fmt.Sprintf(`{"name":%q,"gauge":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}]}}`,
		mHostStart, sAttr("zone", "package-0"), ns(0)+3000*1e6, float64(ns(0)+1500*1e6)/1e9))
	job = stepJob(t, map[string]string{"gn1": steps("gn1", []int64{2500, 17500}, nil)}, []gpuCurve{constant("gn1", 0, 300, true, sec...)},
		map[string]string{"gn1": start + hostCurve("gn1", map[string]float64{"package-0": 100}, 1500, late...)})
	if r, err = Build(job); err != nil {
		t.Fatal(err)
	}
	if b := hostOf(t, r, "gn1", "batch"); !within1(b.Joules, 1650, 1e-6) || !within1(b.BracketSeconds, 1.5, 1e-9) || !b.Verdict.Trusted {
		t.Errorf("batch from the sums' start: %+v", b)
	}

	// No node with host power: one line after the GPUs' energy.
	job = stepJob(t, map[string]string{"gn1": steps("gn1", []int64{2500, 17500}, nil)}, []gpuCurve{constant("gn1", 0, 300, true, sec...)}, nil)
	if r, err = Build(job); err != nil {
		t.Fatal(err)
	}
	text.Reset()
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if len(r.HostEnergy) != 0 || !strings.Contains(flat(text.String()), "host power none on any node (plugstack host_power=rapl") {
		t.Errorf("no host power anywhere: %+v\n%s", r.HostEnergy, text.String())
	}
}

// hwmonLine is a line of the cgroup readings' hwmon power gauge on
// node: the power meter's sensor power1 at ms (W).
func hwmonLine(node string, ms int64, w float64) string {
	return metricsLine(node, "cgroup", fmt.Sprintf(`{"name":%q,"gauge":{"dataPoints":[{"attributes":[%s,%s,%s],"timeUnixNano":"%d","asDouble":%v}]}}`,
		mHostPower, sAttr("chip", "power_meter"), sAttr("hwmon", "hwmon3"), sAttr("sensor", "power1"), ns(0)+ms*1e6, w))
}

// hwmonCurve is node's power meter drawing w(ms) W, sampled at ms.
func hwmonCurve(node string, w func(ms int64) float64, ms ...int64) string {
	var b strings.Builder
	for _, t := range ms {
		b.WriteString(hwmonLine(node, t, w(t)))
	}
	return b.String()
}

// TestHostEnergyHwmon: gn2 has no RAPL energy but its power meter's power
// (hwmon) every second, rising from 200 W by 10 W a second: its batch
// script (2.5 s to 17.5 s, between the samples at 2 s and 18 s), step 0
// and run get that power integrated (trapezoids: exact for a line), from
// hwmon power, attributed as the node's meter; gn1 serves both RAPL
// energy and hwmon power, and its figure is RAPL's. A node whose meter
// was not sampled for 5 s fails the windows over the gap (and says the
// cadence needed), not the others. Text, JSON and HTML say where each
// figure is from.
func TestHostEnergyHwmon(t *testing.T) {
	sec := every(0, 20000, 1000)
	two := every(0, 20000, 2000)
	rising := func(ms int64) float64 { return 200 + 10*float64(ms)/1000 }
	job := stepJob(t, map[string]string{
		"gn1": steps("gn1", []int64{2500, 17500}, []int64{5000, 13000}),
		"gn2": steps("gn2", []int64{2500, 17500}, []int64{5000, 13000}),
	}, []gpuCurve{constant("gn1", 0, 300, true, sec...), constant("gn2", 0, 100, true, sec...)},
		map[string]string{
			"gn1": hostCurve("gn1", map[string]float64{"package-0": 120, "package-1": 80, "package-0/dram": 10}, 0, two...) + hwmonCurve("gn1", func(int64) float64 { return 999 }, sec...),
			"gn2": hwmonCurve("gn2", rising, sec...),
		})
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	// The integral of 200 + 10 t W from a to b s: 200 (b - a) + 5 (b² - a²).
	integral := func(a, b float64) float64 { return 200*(b-a) + 5*(b*b-a*a) }
	for _, c := range []struct {
		step       string
		a, b, brkt float64
	}{{"batch", 2, 18, 1}, {"0", 5, 13, 0}, {"", 0, 20, 0}} {
		h := hostOf(t, r, "gn2", c.step)
		t.Logf("gn2 %q: %v J (want %v), %v W, gap %v s", c.step, h.Joules, integral(c.a, c.b), h.Watts, h.MaxGapSeconds)
		if !within1(h.Joules, integral(c.a, c.b), 1e-6) || !within1(h.Watts, integral(c.a, c.b)/(c.b-c.a), 1e-6) || !within1(h.BracketSeconds, c.brkt, 1e-9) ||
			!within1(h.MaxGapSeconds, 1, 1e-9) || h.ErrorJoules.Known() || h.Source != HostSourceHwmon || h.Attribution != HostAttributionMeter ||
			strings.Join(h.Zones, ",") != "power_meter/hwmon3/power1" || !h.Verdict.Trusted {
			t.Errorf("gn2 %q: %+v", c.step, h)
		}
	}
	if b := hostOf(t, r, "gn1", "batch"); !within1(b.Joules, 16*210, 1e-6) || b.Source != HostSourceRAPL || b.Attribution != HostAttributionNode || b.MaxGapSeconds.Known() {
		t.Errorf("gn1 batch, with RAPL and hwmon: %+v, want RAPL's", b)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	tx := flat(text.String())
	for _, want := range []string{"host energy (RAPL and hwmon; the node's)", flat(HostAttributionNode), flat(HostAttributionMeter),
		"gn2 step batch 4800.0 J (300.0 W)", "from hwmon power (samples at most 1.00 s apart), power_meter/hwmon3/power1; trusted"} {
		if !strings.Contains(tx, want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	js, err := json.Marshal(hostOf(t, r, "gn2", "batch"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"joules":4800,`) || !strings.Contains(string(js), `"source":"from hwmon power","max_gap_seconds":1,`) || !strings.Contains(string(js), `"error_joules":null`) {
		t.Errorf("JSON: %s", js)
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page, nil); err != nil {
		t.Fatal(err)
	}
	if h := page.String(); !strings.Contains(h, "Host energy (RAPL and hwmon; the node") || !strings.Contains(h, "from hwmon power") || !strings.Contains(h, "4800.0") {
		t.Errorf("the HTML has no host energy table with gn2's hwmon figure")
	}

	// 215 W, no sample from 15 s to 18 s: 5 s between the samples at 14 s
	// and 19 s. The batch script (its samples 2 s and 19 s) is not
	// trusted, step 0 (5 s to 13 s) is.
	gapped := append(every(0, 14000, 1000), every(19000, 20000, 1000)...)
	job = stepJob(t, map[string]string{"gn1": steps("gn1", []int64{2500, 17500}, []int64{5000, 13000})},
		[]gpuCurve{constant("gn1", 0, 300, true, sec...)}, map[string]string{"gn1": hwmonCurve("gn1", func(int64) float64 { return 215 }, gapped...)})
	if r, err = Build(job); err != nil {
		t.Fatal(err)
	}
	b := hostOf(t, r, "gn1", "batch")
	if b.Verdict.Trusted || !within1(b.MaxGapSeconds, 5, 1e-9) || !within1(b.Joules, 215*17, 1e-6) || len(b.Verdict.Why) != 1 ||
		b.Verdict.Why[0] != ReasonGap+": gn1 host power_meter/hwmon3/power1 5.0 s: integrating hwmon power needs a sample every 3 s or less (otel.scrape_interval_seconds: 3 or less)" {
		t.Errorf("batch over a 5 s gap: %+v", b)
	}
	if s0 := hostOf(t, r, "gn1", "0"); !s0.Verdict.Trusted || !within1(s0.Joules, 215*8, 1e-6) || !within1(s0.MaxGapSeconds, 1, 1e-9) {
		t.Errorf("step 0 clear of the gap: %+v", s0)
	}
}
