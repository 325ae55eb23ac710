package inspect

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dcgmPt is one dcgm-exporter point as the collector writes it: the
// exporter's labels (gpu, UUID, pci_bus_id, device, modelName, Hostname)
// and the collector's gpu_attribution; ms after ns(0).
func dcgmPt(name string, sum bool, node string, gpu int, uuid, attribution string, ms int64, v float64) string {
	as := []string{sAttr("gpu", fmt.Sprint(gpu)), sAttr("UUID", uuid), sAttr("pci_bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+gpu)),
		sAttr("device", fmt.Sprintf("nvidia%d", gpu)), sAttr("modelName", "NVIDIA H100 80GB HBM3"), sAttr("Hostname", node),
		sAttr("gpu_attribution", attribution)}
	dp := fmt.Sprintf(`{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}]`, strings.Join(as, ","), ns(0)+ms*1e6, v)
	if sum {
		return fmt.Sprintf(`{"name":%q,"sum":%s,"aggregationTemporality":2,"isMonotonic":true}}`, name, dp)
	}
	return fmt.Sprintf(`{"name":%q,"gauge":%s}}`, name, dp)
}

// tokPt is a line with one vllm:generation_tokens_total point of the
// model server producer on node.
func tokLine(node, producer string, ms int64, v float64) string {
	return metricsLine(node, producer, fmt.Sprintf(`{"name":"vllm_generation_tokens_total","sum":{"dataPoints":[{"attributes":[%s],"timeUnixNano":"%d","asDouble":%v}],"aggregationTemporality":2,"isMonotonic":true}}`,
		vl, ns(0)+ms*1e6, v))
}

// gpuCurve is one GPU's samples: at each of ms, the energy counter (mJ)
// and/or the power (W).
type gpuCurve struct {
	node, uuid  string
	gpu         int
	attribution string
	counter     bool // serve DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION
	power       bool // serve DCGM_FI_DEV_POWER_USAGE
	ms          []int64
	mj, w       []float64
}

// constant is a GPU drawing w W from ms 0, its counter at 1e9 mJ then.
func constant(node string, gpu int, w float64, counter bool, ms ...int64) gpuCurve {
	c := gpuCurve{node: node, gpu: gpu, uuid: fmt.Sprintf("GPU-5fd4c1a0-0000-4000-8000-%012d", gpu), attribution: "job", counter: counter, power: !counter, ms: append([]int64(nil), ms...)}
	if node == "gn2" {
		c.uuid = fmt.Sprintf("GPU-77aa0000-0000-4000-8000-%012d", gpu)
	}
	for _, t := range ms {
		c.mj = append(c.mj, 1e9+w*float64(t))
		c.w = append(c.w, w)
	}
	return c
}

func every(from, to, step int64) []int64 {
	var out []int64
	for t := from; t <= to; t += step {
		out = append(out, t)
	}
	return out
}

func (c gpuCurve) lines() string {
	var b strings.Builder
	for i, t := range c.ms {
		var ps []string
		if c.counter {
			ps = append(ps, dcgmPt(mEnergy, true, c.node, c.gpu, c.uuid, c.attribution, t, c.mj[i]))
		}
		if c.power {
			ps = append(ps, dcgmPt(mPower, false, c.node, c.gpu, c.uuid, c.attribution, t, c.w[i]))
		}
		b.WriteString(metricsLine(c.node, "dcgm", ps...))
	}
	return b.String()
}

// stepJob writes a job: the phase spans per node (traces), the GPUs'
// curves and the other metric lines, gn1 the first node, others under
// nodes/.
func stepJob(t *testing.T, traces map[string]string, curves []gpuCurve, extra map[string]string) string {
	t.Helper()
	job := t.TempDir()
	dir := func(node string) string {
		d := filepath.Join(job, "otel")
		if node != "gn1" {
			d = filepath.Join(d, "nodes", node)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	metrics := map[string]*strings.Builder{}
	add := func(node, s string) {
		if metrics[node] == nil {
			metrics[node] = &strings.Builder{}
		}
		metrics[node].WriteString(s)
	}
	for _, c := range curves {
		add(c.node, c.lines())
	}
	for node, s := range extra {
		add(node, s)
	}
	for node, s := range traces {
		if err := os.WriteFile(filepath.Join(dir(node), "traces.jsonl"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for node, b := range metrics {
		if err := os.WriteFile(filepath.Join(dir(node), "metrics.jsonl"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return job
}

// steps are the phase spans of a node: the batch step with its script
// from batch[0] to batch[1] ms (none when batch is nil) and step 0 from
// s0[0] to s0[1] (end not known when s0[1] < 0).
func steps(node string, batch, s0 []int64) string {
	root := "1000000000000001"
	if node != "gn1" {
		root = "2000000000000001"
	}
	var ps []string
	if batch != nil {
		ps = append(ps, phase(node, vocab.SpanStep, root[:15]+"5", root, batch[0]-500, batch[1]+500, "", "", sAttr(vocab.AttrStepID, "batch"), bAttr(vocab.AttrEndKnown, true)),
			phase(node, vocab.SpanBatchScript, root[:15]+"6", root[:15]+"5", batch[0], batch[1], "", "", bAttr(vocab.AttrEndKnown, true)))
	}
	if s0 != nil {
		if s0[1] < 0 {
			ps = append(ps, phase(node, vocab.SpanStep, root[:15]+"7", root, s0[0], 30000, "the step's end was not seen on this node", "", sAttr(vocab.AttrStepID, "0"), bAttr(vocab.AttrEndKnown, false)))
		} else {
			ps = append(ps, phase(node, vocab.SpanStep, root[:15]+"7", root, s0[0], s0[1], "", "", sAttr(vocab.AttrStepID, "0"), bAttr(vocab.AttrEndKnown, true)))
		}
	}
	ps = append(ps, phase(node, vocab.SpanStep, root[:15]+"8", root, 0, 30000, "", "", sAttr(vocab.AttrStepID, "extern"), bAttr(vocab.AttrEndKnown, true)),
		phase(node, vocab.SpanJob, root, "", 0, 30000, "", "", sAttr(vocab.AttrJobID, "42"), bAttr(vocab.AttrStartKnown, true)))
	return phaseLine(node, ps...)
}

func tokens(node, producer string, perSec float64, ms ...int64) string {
	var b strings.Builder
	for _, t := range ms {
		b.WriteString(tokLine(node, producer, t, perSec*float64(t)/1000))
	}
	return b.String()
}

func stepOf(t *testing.T, r *Report, node, step string) StepEnergy {
	t.Helper()
	for _, s := range r.StepEnergy {
		if s.Node == node && s.Step == step {
			return s
		}
	}
	t.Fatalf("no step %s on %s in %+v", step, node, r.StepEnergy)
	return StepEnergy{}
}

func roleOfReport(t *testing.T, r *Report, role, step string) RoleEnergy {
	t.Helper()
	for _, x := range r.RoleEnergy {
		if x.Role == role && x.Step == step {
			return x
		}
	}
	t.Fatalf("no role %s step %s in %+v", role, step, r.RoleEnergy)
	return RoleEnergy{}
}

// flat is text with its wrapped lines joined and runs of spaces as one.
func flat(s string) string { return strings.Join(strings.Fields(s), " ") }

func within1(v Value, want, tol float64) bool {
	return v.Known() && math.Abs(float64(v)-want) <= tol
}

// TestStepEnergy: a two-node job, the batch step on gn1 (its script from
// 2.5 s to 17.5 s) and step 0 on both nodes (5 s to 13 s); gn1's two GPUs
// (300 W and 200 W) serve the energy counter every second, gn2's two (100
// W and 150 W) only their power; the policy is served on gn1 (10 tokens
// per second), the judge on gn2 (5 per second).
func TestStepEnergy(t *testing.T) {
	sec := every(0, 20000, 1000)
	job := stepJob(t, map[string]string{
		"gn1": steps("gn1", []int64{2500, 17500}, []int64{5000, 13000}),
		"gn2": steps("gn2", nil, []int64{5000, 13000}),
	}, []gpuCurve{
		constant("gn1", 0, 300, true, sec...), constant("gn1", 1, 200, true, sec...),
		constant("gn2", 0, 100, false, sec...), constant("gn2", 1, 150, false, sec...),
	}, map[string]string{
		"gn1": tokens("gn1", "gym-vllm/policy", 10, sec...),
		"gn2": tokens("gn2", "gym-vllm/judge", 5, sec...),
	})
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	// The batch script's window, 15 s, lies between the samples at 2 s and
	// 18 s (1 s beyond it): 16 s x 500 W from the counter; the samples
	// inside it (3 s to 17 s) bound the window's own from below.
	b := stepOf(t, r, "gn1", "batch")
	if b.Span != vocab.SpanBatchScript || !within1(b.WindowSeconds, 15, 1e-9) || !within1(b.Joules, 8000, 1e-6) || !within1(b.ErrorJoules, 1000, 1e-6) ||
		!within1(b.BracketSeconds, 1, 1e-9) || b.Source != SourceEnergyCounter || len(b.GPUs) != 2 || b.MatchedBy != "UUID" || !b.Verdict.Trusted {
		t.Errorf("batch on gn1: %+v", b)
	}
	if 7500 < float64(b.Joules-b.ErrorJoules) || 7500 > float64(b.Joules) {
		t.Errorf("the true 7500 J lies outside [%v, %v]", b.Joules-b.ErrorJoules, b.Joules)
	}
	// Step 0's window falls on samples: exact.
	s0 := stepOf(t, r, "gn1", "0")
	if !within1(s0.Joules, 4000, 1e-6) || !within1(s0.ErrorJoules, 0, 1e-9) || !s0.Verdict.Trusted {
		t.Errorf("step 0 on gn1: %+v", s0)
	}
	g2 := stepOf(t, r, "gn2", "0")
	if !within1(g2.Joules, 2000, 1e-6) || g2.ErrorJoules.Known() || g2.Source != SourcePower || !within1(g2.MaxGapSeconds, 1, 1e-9) || !g2.Verdict.Trusted {
		t.Errorf("step 0 on gn2: %+v", g2)
	}
	for _, s := range r.StepEnergy {
		if s.Step == "extern" {
			t.Errorf("the extern step has a figure: %+v", s)
		}
	}
	pol, jud := roleOfReport(t, r, "policy", "0"), roleOfReport(t, r, "judge", "0")
	if !within1(pol.Joules, 4000, 1e-6) || !within1(pol.GenerationTokens, 80, 1e-9) || !within1(pol.JoulesPer1kTokens, 50000, 1e-6) ||
		strings.Join(pol.Nodes, ",") != "gn1" || !pol.Verdict.Trusted {
		t.Errorf("policy: %+v", pol)
	}
	if !within1(jud.Joules, 2000, 1e-6) || !within1(jud.GenerationTokens, 40, 1e-9) || !within1(jud.JoulesPer1kTokens, 50000, 1e-6) || !jud.Verdict.Trusted {
		t.Errorf("judge: %+v", jud)
	}
	// The batch step ran on gn1 only; the judge's node gn2 is counted
	// over its window too.
	jb := roleOfReport(t, r, "judge", "batch")
	if !within1(jb.Joules, 4000, 1e-6) || !within1(jb.GenerationTokens, 80, 1e-9) || !jb.Verdict.Trusted {
		t.Errorf("judge over the batch step: %+v", jb)
	}
	if r.EnergyMatching.By != "UUID" || !strings.Contains(r.EnergyMatching.Note, "minor") {
		t.Errorf("matching %+v", r.EnergyMatching)
	}

	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"== energy per step and role (dcgm-exporter)",
		"gn1 step batch 8000.0 J (the window's own: 7000.0 to 8000.0 J; samples 1.00 s beyond it), counter over 15 s, 2 GPUs; trusted",
		"gn2 step 0 2000.0 J, power over 8.00 s, 2 GPUs; trusted",
		"role policy step 0 4000.0 J, counter on gn1, 50000.00 J per 1,000 tokens (80 generation tokens); trusted",
		"role judge step batch 4000.0 J (samples 1.00 s beyond the window), power on gn2, 50000.00 J per 1,000 tokens (80 generation tokens); trusted"} {
		if !strings.Contains(flat(text.String()), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	var page strings.Builder
	if err := r.WriteHTML(&page, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<table id="step-energy">`, `<table id="role-energy">`,
		`<td>gn1</td><td class="l">batch</td><td>15.00</td><td>8000.0</td><td>7000.0</td><td>1.00</td>`,
		`<td class="l">policy</td><td class="l">0</td><td class="l">gn1</td><td>4000.0</td><td>80</td><td>50000.00</td>`} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %s", want)
		}
	}
	// In the browser: GPU power per GPU with the three step windows as
	// bands.
	for _, c := range checkHTML(t, r, "chart-throughput", "chart-power", "chart-phases") {
		if c.ID == "chart-power" && (c.Bands != 3 || len(c.Series) != 2) {
			t.Errorf("power chart %+v: want gn2's 2 GPUs (gn1's serve only the counter) and 3 bands", c)
		}
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"step_energy":[`, `"role_energy":[`, `"joules_per_1k_generation_tokens":50000`, `"verdict":{"trusted":true}`, `"matched_by":"UUID"`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON lacks %s", want)
		}
	}
}

// TestStepEnergyVerdicts: each reason a figure is not trusted, alone.
func TestStepEnergyVerdicts(t *testing.T) {
	sec := every(0, 20000, 1000)
	twoGPUs := func(counter bool, ms ...int64) []gpuCurve {
		return []gpuCurve{constant("gn1", 0, 300, counter, ms...), constant("gn1", 1, 200, counter, ms...)}
	}
	pol := map[string]string{"gn1": tokens("gn1", "gym-vllm/policy", 10, sec...)}
	for _, c := range []struct {
		name   string
		s0     []int64
		curves func() []gpuCurve
		extra  map[string]string
		reason string
		figure bool // a figure is still given
		role   bool // the reason is the role's, not the step's
	}{
		{name: "gap", s0: []int64{5000, 15000}, curves: func() []gpuCurve { return twoGPUs(false, every(0, 20000, 5000)...) }, reason: ReasonGap, figure: true},
		{name: "reset", s0: []int64{5000, 13000}, curves: func() []gpuCurve {
			c := twoGPUs(true, sec...)
			for i := range c[0].mj {
				if c[0].ms[i] >= 9000 {
					c[0].mj[i] -= 1e9 // the driver reloaded at 9 s
				}
			}
			return c
		}, reason: ReasonReset, figure: true},
		{name: "not monotonic", s0: []int64{5000, 13000}, curves: func() []gpuCurve {
			c := twoGPUs(true, sec...)
			c[1].ms[8] = 6500 // after 7 s
			return c
		}, reason: ReasonNotMonotonic, figure: true},
		{name: "not bracketed", s0: []int64{5000, 13000}, curves: func() []gpuCurve { return twoGPUs(true, every(6000, 20000, 1000)...) }, reason: ReasonNotBracketed, figure: false},
		{name: "a GPU missing at the end", s0: []int64{5000, 13000}, curves: func() []gpuCurve {
			return []gpuCurve{constant("gn1", 0, 300, true, sec...), constant("gn1", 1, 200, true, every(0, 10000, 1000)...)}
		}, reason: ReasonNotMatched, figure: true},
		{name: "one UUID on two series", s0: []int64{5000, 13000}, curves: func() []gpuCurve {
			c := twoGPUs(true, sec...)
			c[1].uuid = c[0].uuid
			return c
		}, reason: ReasonNotMatched, figure: true},
		{name: "MIG", s0: []int64{5000, 13000}, curves: func() []gpuCurve {
			c := twoGPUs(true, sec...)
			c[1].attribution = "mig"
			return c
		}, reason: ReasonNotAttributable, figure: false},
		{name: "window not known", s0: []int64{5000, -1}, curves: func() []gpuCurve { return twoGPUs(true, sec...) }, reason: ReasonWindowUnknown, figure: false},
		{name: "no GPU samples on the node", s0: []int64{5000, 13000}, curves: func() []gpuCurve {
			return []gpuCurve{constant("gn2", 0, 300, true, sec...)}
		}, reason: ReasonNoSamples, figure: false},
		{name: "two roles on the node", s0: []int64{5000, 13000}, curves: func() []gpuCurve { return twoGPUs(true, sec...) },
			extra:  map[string]string{"gn1": tokens("gn1", "gym-vllm/policy", 10, sec...) + tokens("gn1", "gym-vllm/judge", 5, sec...)},
			reason: ReasonSharedNode, figure: false, role: true},
		{name: "tokens end early", s0: []int64{5000, 13000}, curves: func() []gpuCurve { return twoGPUs(true, sec...) },
			extra:  map[string]string{"gn1": tokens("gn1", "gym-vllm/policy", 10, every(0, 9000, 1000)...)},
			reason: ReasonTokens, figure: true, role: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			extra := pol
			if c.extra != nil {
				extra = c.extra
			}
			r, err := Build(stepJob(t, map[string]string{"gn1": steps("gn1", nil, c.s0)}, c.curves(), extra))
			if err != nil {
				t.Fatal(err)
			}
			var v Verdict
			var j Value
			if c.role {
				x := roleOfReport(t, r, "policy", "0")
				v, j = x.Verdict, x.Joules
				// From 5 s to the last sample at 9 s: 40 tokens, a lower bound.
				if c.reason == ReasonTokens && (!within1(x.GenerationTokens, 40, 1e-9) || !within1(x.JoulesPer1kTokens, 100000, 1e-6)) {
					t.Errorf("tokens %v, per 1k %v: want 40 and 100000 J", x.GenerationTokens, x.JoulesPer1kTokens)
				}
			} else {
				x := stepOf(t, r, "gn1", "0")
				v, j = x.Verdict, x.Joules
			}
			found := false
			for _, w := range v.Why {
				found = found || strings.HasPrefix(w, c.reason)
			}
			if v.Trusted || !found || len(v.Why) != 1 {
				t.Errorf("verdict %+v: want only %q", v, c.reason)
			}
			if j.Known() != c.figure {
				t.Errorf("joules %v: figure %v, want %v", j, j.Known(), c.figure)
			}
			var text strings.Builder
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(flat(text.String()), "NOT TRUSTED: "+c.reason) {
				t.Errorf("text lacks the reason:\n%s", text.String())
			}
		})
	}
}

// seriesPoints reads the points of metric (of GPU gpu, "" for any) from
// an OTLP-JSON metrics file: [unix ms, value], in file order.
func seriesPoints(t *testing.T, path, metric, gpu string) [][2]float64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]float64
	// Whole lines only: a collector may be writing the last one.
	whole := string(data[:strings.LastIndexByte(string(data), '\n')+1])
	for _, l := range strings.Split(whole, "\n") {
		if l == "" {
			continue
		}
		var line otlpLine
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatal(err)
		}
		for _, rm := range line.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != metric {
						continue
					}
					var dps []numberPoint
					if m.Gauge != nil {
						dps = m.Gauge.DataPoints
					} else if m.Sum != nil {
						dps = m.Sum.DataPoints
					}
					for _, p := range dps {
						g := ""
						for _, a := range p.Attributes {
							if a.Key == "gpu" {
								g = a.Value.text()
							}
						}
						if v, ok := p.value(); ok && (gpu == "" || g == gpu) {
							out = append(out, [2]float64{float64(p.Time.ms()), v})
						}
					}
				}
			}
		}
	}
	return out
}

// TestStepEnergyFromCollectorFiles: the files the real collector wrote
// while scraping the dcgm stand-in (--energy: each scrape adds the power
// it serves times the time since the previous scrape, in mJ) and a vLLM
// stand-in every second (testdata/gpus/whole, GPU 1 the job's), with a
// step whose window lies between the second and the fourth scrape. The
// counter's figure between the bracketing samples (the first and the
// fourth) equals the served power summed over the scrape intervals
// within 2 % (the stand-in's clock is not the scraper's), and the tokens
// are the counter's increase between the same samples.
func TestStepEnergyFromCollectorFiles(t *testing.T) {
	src := filepath.Join("testdata", "gpus", "whole", "otel")
	job := t.TempDir()
	dir := filepath.Join(job, "otel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"metrics.jsonl", "collector.yaml", "receipt.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	metrics := filepath.Join(dir, "metrics.jsonl")
	power := seriesPoints(t, metrics, mPower, "1")
	energy := seriesPoints(t, metrics, mEnergy, "1")
	tok := seriesPoints(t, metrics, mGenTokens, "")
	if len(power) < 5 || len(energy) != len(power) || len(tok) < 5 {
		t.Fatalf("%d power, %d energy, %d token points: want 5 or more", len(power), len(energy), len(tok))
	}
	// ms after ns(0), as phase() takes them.
	off := func(ms float64) int64 { return int64(ms) - ns(0)/1e6 }
	t0 := off((power[1][0] + power[2][0]) / 2)
	t1 := off((power[3][0] + power[4][0]) / 2)
	if err := os.WriteFile(filepath.Join(dir, "traces.jsonl"), []byte(steps("gn7", nil, []int64{t0, t1})), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Build(job)
	if err != nil {
		t.Fatal(err)
	}
	s := stepOf(t, r, "gn7", "0")
	want := 0.0 // W x s over the scrape intervals from the 2nd to the 4th
	for i := 2; i <= 4; i++ {
		want += power[i][1] * (power[i][0] - power[i-1][0]) / 1000
	}
	exact := (energy[4][1] - energy[1][1]) / 1000
	if !within1(s.Joules, exact, 1e-6) || math.Abs(float64(s.Joules)-want) > 0.02*want || s.Source != SourceEnergyCounter || !s.Verdict.Trusted {
		t.Errorf("step 0 on gn7: %+v; want %.1f J (the counter), %.1f J (the power served) within 2%%", s, exact, want)
	}
	t.Logf("step 0 on gn7: %.1f J from the counter (%.1f to %.1f J the window's own, %.2f s of bracket); %.1f J served", float64(s.Joules), float64(s.Joules-s.ErrorJoules), float64(s.Joules), float64(s.BracketSeconds), want)
	inner := (energy[3][1] - energy[2][1]) / 1000
	if !within1(s.ErrorJoules, exact-inner, 1e-6) || !within1(s.BracketSeconds, float64(t0-off(power[1][0])+off(power[4][0])-t1)/1000, 1e-9) {
		t.Errorf("error %v J over %v s; want %.1f J", s.ErrorJoules, s.BracketSeconds, exact-inner)
	}
	// The prolog saw GPU 1 as Slurm's index: kept in index order.
	if m := r.EnergyMatching; m.By != "UUID" || fmt.Sprint(m.Nodes) != "[{gn7 index}]" {
		t.Errorf("matching %+v", m)
	}
	ro := roleOfReport(t, r, "policy", "0")
	// The token samples' times are the vLLM scrape's, not the GPUs'.
	var b0, b1 int = -1, -1
	for i, p := range tok {
		if off(p[0]) <= t0 {
			b0 = i
		}
		if off(p[0]) >= t1 && b1 < 0 {
			b1 = i
		}
	}
	if b0 < 0 || b1 < 0 {
		t.Fatalf("token samples %v do not bracket %d..%d", tok, t0, t1)
	}
	tokens := tok[b1][1] - tok[b0][1]
	if !within1(ro.GenerationTokens, tokens, 1e-9) || !within1(ro.JoulesPer1kTokens, exact/tokens*1000, 1e-6) || !ro.Verdict.Trusted {
		t.Errorf("policy: %+v; want %v tokens, %.2f J per 1,000", ro, tokens, exact/tokens*1000)
	}
}

// TestStepEnergySlurmRun: a two-node job on real Slurm (testdata/slurmrun/
// gym-two-nodes: the dcgm stand-in's power every second, no
// SLURM_JOB_GPUS on the test cluster, so every GPU is "unnamed"): each
// step of each node (the batch script, step 0 on both nodes; not extern)
// has a verdict and no figure, the GPUs not being known as the job's.
func TestStepEnergySlurmRun(t *testing.T) {
	r, _ := slurmRun(t, "gym-two-nodes")
	var got []string
	for _, s := range r.StepEnergy {
		got = append(got, s.Node+" "+s.Step+" "+s.Span)
		if s.Joules.Known() || s.Verdict.Trusted || len(s.Verdict.Why) != 1 || !strings.HasPrefix(s.Verdict.Why[0], ReasonNotAttributable+": "+s.Node) ||
			!strings.Contains(s.Verdict.Why[0], "not named by Slurm") {
			t.Errorf("%s step %s: %+v", s.Node, s.Step, s)
		}
		if !s.WindowSeconds.Known() || s.WindowSeconds <= 0 {
			t.Errorf("%s step %s: window %v", s.Node, s.Step, s.WindowSeconds)
		}
	}
	if strings.Join(got, ",") != "gn1 batch slurm.batch_script,gn1 0 slurm.step,gn2 0 slurm.step" {
		t.Errorf("steps %q", got)
	}
	if m := r.EnergyMatching; fmt.Sprint(m.Nodes) != "[{gn1 every GPU} {gn2 every GPU}]" {
		t.Errorf("matching %+v", m.Nodes)
	}
	if len(r.RoleEnergy) == 0 {
		t.Fatal("no role figures")
	}
	for _, x := range r.RoleEnergy {
		// The servers ran in the steps: their last scrape is before the
		// step's end.
		if x.Joules.Known() || x.Verdict.Trusted || len(x.Verdict.Why) != 2 || !strings.HasPrefix(x.Verdict.Why[1], ReasonTokens) ||
			!x.GenerationTokens.Known() || x.GenerationTokens <= 0 {
			t.Errorf("role %s step %s: %+v", x.Role, x.Step, x)
		}
	}
}

// TestStepEnergyLongSeries: 20,000 samples a second of one GPU's energy
// counter and another's power: inspect keeps at most 8192 of each (every
// fourth by the end), the counter's figure stays the energy between the
// kept samples around the window (exact: constant power), and the power
// figure's verdict names the gap the thinning made.
func TestStepEnergyLongSeries(t *testing.T) {
	sec := every(0, 20000*1000, 1000)
	r, err := Build(stepJob(t, map[string]string{"gn1": steps("gn1", nil, []int64{10_000_500, 10_100_500})},
		[]gpuCurve{constant("gn1", 0, 300, true, sec...)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	s := stepOf(t, r, "gn1", "0")
	if !s.Verdict.Trusted || !within1(s.Joules, 300*(100+float64(s.BracketSeconds)), 1e-6) || s.BracketSeconds <= 1 || s.BracketSeconds > 8 ||
		float64(s.Joules-s.ErrorJoules) > 300*100 {
		t.Errorf("counter: %+v", s)
	}
	r, err = Build(stepJob(t, map[string]string{"gn1": steps("gn1", nil, []int64{10_000_500, 10_100_500})},
		[]gpuCurve{constant("gn1", 0, 300, false, sec...)}, nil))
	if err != nil {
		t.Fatal(err)
	}
	s = stepOf(t, r, "gn1", "0")
	if s.Verdict.Trusted || len(s.Verdict.Why) != 1 || !strings.HasPrefix(s.Verdict.Why[0], ReasonGap) || !strings.Contains(s.Verdict.Why[0], "kept every 4th") {
		t.Errorf("power: %+v", s.Verdict)
	}
}

// TestEnergyMatchingByUUID: where the prolog saw the job's MIG instances
// by parent UUID and instance id (testdata/gpus/mig-exact), its collector
// kept them by device, and inspect says so; every GPU being a MIG
// instance, no figure.
func TestEnergyMatchingByUUID(t *testing.T) {
	r, err := Build(filepath.Join("testdata", "gpus", "mig-exact", "otel"))
	if err != nil {
		t.Fatal(err)
	}
	if m := r.EnergyMatching; fmt.Sprint(m.Nodes) != "[{gn7 UUID}]" || m.By != "UUID" {
		t.Errorf("matching %+v", m)
	}
	r, err = Build(filepath.Join("testdata", "gpus", "mig-uuid", "otel"))
	if err != nil {
		t.Fatal(err)
	}
	if m := r.EnergyMatching; fmt.Sprint(m.Nodes) != "[{gn7 every MIG instance}]" {
		t.Errorf("matching %+v", m)
	}
}

// TestStepEnergyRequeued: a job requeued once writes both runs' phase
// spans (each under its own trace and slurm_job_restart_count) to the
// same node dir: each run's step 0 is a figure of its own, over its own
// window, and so is each run's role figure.
func TestStepEnergyRequeued(t *testing.T) {
	sec := every(0, 40000, 1000)
	run := func(restart int, trace string, from, to int64) string {
		l := steps("gn1", nil, []int64{from, to})
		l = strings.ReplaceAll(l, "5c4b0f2a9d3e4c1b8a7f6e5d4c3b2a19", trace)
		return strings.Replace(l, `{"key":"slurm_job_id","value":{"stringValue":"42"}}`,
			fmt.Sprintf(`{"key":"slurm_job_id","value":{"stringValue":"42"}},{"key":"slurm_job_restart_count","value":{"intValue":"%d"}}`, restart), 1)
	}
	r, err := Build(stepJob(t, map[string]string{"gn1": run(0, "5c4b0f2a9d3e4c1b8a7f6e5d4c3b2a19", 2000, 6000) + run(1, "6d5c1f3b0e4f5d2c9b8a7f6e5d4c3b2a", 22000, 32000)},
		[]gpuCurve{constant("gn1", 0, 300, true, sec...)}, map[string]string{"gn1": tokens("gn1", "gym-vllm/policy", 10, sec...)}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range r.StepEnergy {
		got = append(got, fmt.Sprintf("%s %s %v", s.Restart, s.Step, s.Joules))
	}
	if strings.Join(got, ",") != "0 0 1200,1 0 3000" {
		t.Errorf("steps %q, want run 0's 4 s and run 1's 10 s at 300 W", got)
	}
	got = nil
	for _, x := range r.RoleEnergy {
		got = append(got, fmt.Sprintf("%s %s %v %v", x.Restart, x.Step, x.Joules, x.GenerationTokens))
	}
	if strings.Join(got, ",") != "0 0 1200 40,1 0 3000 100" {
		t.Errorf("roles %q", got)
	}
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flat(text.String()), "gn1 run 1 step 0 3000.0 J") {
		t.Errorf("text:\n%s", text.String())
	}
}
