package inspect

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// dcgm-exporter's energy counter (its default counters,
// etc/default-counters.csv: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter,
// Total energy consumption since boot (in mJ)"; DCGM_FI_DEV_POWER_USAGE is
// a gauge in W), the attribute the collector stamps on every dcgm series it
// keeps (helper/render/gpus.go) and dcgm-exporter's MIG labels.
const (
	mEnergy      = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
	aAttribution = "gpu_attribution"
	aGPUInstance = "GPU_I_ID"
	aGPUProfile  = "GPU_I_PROFILE"

	// SourceEnergyCounter and SourcePower name where Energy.Joules came
	// from.
	SourceEnergyCounter = mEnergy + " (mJ counter: its increase)"
	SourcePower         = mPower + " (W gauge: trapezoids over the scrape times)"
)

func init() {
	tracked[mEnergy] = true
}

// Energy is what the job's GPUs used, per generated token and per rollout.
// A figure is given only when every GPU series in the files is a whole GPU
// that was the job's alone (gpu_attribution "job"); on a MIG-partitioned or
// shared GPU DCGM's power and energy are the whole GPU's, other tenants'
// work included, and the energy cannot be attributed to the job.
type Energy struct {
	// Joules is the energy of the job's GPUs (J) over WindowSeconds, the
	// time from the first to the last scrape of their series: per GPU the
	// increase of DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ / 1000) where
	// the GPU has that counter, else DCGM_FI_DEV_POWER_USAGE (W)
	// integrated over the scrape times (trapezoids). Null when it cannot
	// be attributed or was not measured (Why says why).
	Joules        Value `json:"joules"`
	WindowSeconds Value `json:"window_seconds"`
	// Source is SourceEnergyCounter, SourcePower, or both joined by " + "
	// when the GPUs differ; GPUs is how many GPUs were summed.
	Source string `json:"source,omitempty"`
	GPUs   int    `json:"gpus"`
	// GenerationTokens is vllm:generation_tokens_total over the run,
	// summed over the model servers (from zero at each series' first
	// point); null without vLLM's counter.
	GenerationTokens Value `json:"generation_tokens"`
	// Rollouts is the rollouts of the run (RolloutsSource: Gym's
	// gym.rollout.completed_total over every outcome, else the gym.rollout
	// spans, else the gym.rollout.duration_ms histogram's count).
	Rollouts       Value  `json:"rollouts"`
	RolloutsSource string `json:"rollouts_source,omitempty"`
	// JoulesPer1kTokens is Joules per 1,000 generation tokens (J);
	// JoulesPerRollout Joules per rollout (J). Null when either side is.
	JoulesPer1kTokens Value `json:"joules_per_1k_generation_tokens"`
	JoulesPerRollout  Value `json:"joules_per_rollout"`
	// NotAttributable lists, per GPU that is not the job's alone, why
	// (MIG instance, shared, not named by Slurm, or not marked): when it
	// is not empty Joules and the figures per token and rollout are null.
	NotAttributable []string `json:"not_attributable,omitempty"`
	// Why says in a few words why Joules is null ("" when it is known).
	Why string `json:"why,omitempty"`
	// Estimate is given where Joules is refused because the job's GPUs
	// are MIG instances of its own (migestimate.go), over each node's
	// samples; EstimatePer1kTokens is it per 1,000 generation tokens (J).
	// Always estimates, labelled with their method; nil and null
	// otherwise.
	Estimate            *Estimate `json:"estimate,omitempty"`
	EstimatePer1kTokens Value     `json:"estimate_per_1k_generation_tokens"`
}

// Why Energy has no figure.
const (
	WhyNotAttributable = "cannot be attributed to the job"
	WhyNoGPUs          = "no dcgm-exporter GPU series"
	WhyNoPower         = "no " + mEnergy + " or " + mPower
)

// integral is a power series' energy: trapezoids between consecutive
// points (W x s = J).
type integral struct {
	n               int
	firstMs, lastMs int64
	lastW, joules   float64
}

func (x *integral) add(ms int64, w float64) {
	if math.IsNaN(w) || (x.n > 0 && ms <= x.lastMs) {
		return
	}
	if x.n > 0 {
		x.joules += (x.lastW + w) / 2 * float64(ms-x.lastMs) / 1000
	} else {
		x.firstMs = ms
	}
	x.n++
	x.lastMs, x.lastW = ms, w
}

// integratePower adds a DCGM_FI_DEV_POWER_USAGE point of series s.
func (a *aggregator) integratePower(s *series, ms int64, w float64) {
	if a.power == nil {
		a.power = map[*series]*integral{}
	}
	x := a.power[s]
	if x == nil {
		x = &integral{}
		a.power[s] = x
	}
	x.add(ms, w)
}

// gpuDevice names one GPU or MIG instance of dcgm-exporter on a node.
type gpuDevice struct{ node, gpu, instance string }

func (d gpuDevice) String() string {
	s := d.node + " gpu " + d.gpu
	if d.instance != "" {
		s += " instance " + d.instance
	}
	return s
}

// whyJobInstance is why a MIG instance of the job's has no measured figure.
const whyJobInstance = "a MIG instance of the job's: DCGM's power and energy are the whole GPU's, other instances' work included"

// attributionWhy says why a GPU series' energy is not the job's ("" when
// it is: a whole GPU marked "job").
func attributionWhy(labels map[string]string) string {
	mig := labels[aGPUInstance] != ""
	switch labels[aAttribution] {
	case "job":
		if mig {
			return "MIG-partitioned: DCGM's power and energy are the whole GPU's"
		}
		return ""
	case "mig":
		return whyJobInstance
	case "shared":
		if mig {
			return "shared: a MIG instance Slurm could not name exactly (other tenants' slices kept)"
		}
		return "shared: Slurm named it by an index on a node with MIG devices"
	case "unnamed":
		return "not named by Slurm (no SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES): every GPU of the node was kept"
	case "":
		if mig {
			return "MIG-partitioned (no gpu_attribution)"
		}
		return "not marked gpu_attribution by the collector: whether it was the job's alone is unknown"
	}
	return fmt.Sprintf("gpu_attribution %q", labels[aAttribution])
}

// gpuSharing lists the GPUs of the files that are not the job's alone,
// one line per GPU: what `inspect` says of a node's shared GPUs.
func (a *aggregator) gpuSharing() []string {
	seen := map[gpuDevice]bool{}
	out := []string{}
	for _, s := range a.order {
		if !strings.HasPrefix(s.key.metric, "DCGM_FI_") || s.labels["gpu"] == "" {
			continue
		}
		d := gpuDevice{s.key.node, s.labels["gpu"], s.labels[aGPUInstance]}
		if seen[d] {
			continue
		}
		seen[d] = true
		if why, _, _ := a.seriesWhy(s.key.node, s.labels); why != "" {
			name := d.String()
			if p := s.labels[aGPUProfile]; p != "" {
				name += " (" + p + ")"
			}
			out = append(out, name+": "+why)
		}
	}
	sort.Strings(out)
	return out
}

// energy computes Energy from the GPUs' series, vLLM's generation tokens
// and Gym's rollouts (r.Gym filled before).
func (a *aggregator) energy(r *Report) Energy {
	nan := Value(math.NaN())
	e := Energy{Joules: nan, WindowSeconds: nan, GenerationTokens: nan, Rollouts: nan, JoulesPer1kTokens: nan, JoulesPerRollout: nan, EstimatePer1kTokens: nan}
	for _, s := range a.byMetric(mGenTokens) {
		if s.c != nil {
			e.GenerationTokens = addV(e.GenerationTokens, s.c.total())
		}
	}
	if done := a.countByLabel(mRolloutDone, aOutcome); len(done) > 0 {
		n := 0.0
		for _, v := range done {
			n += v
		}
		e.Rollouts, e.RolloutsSource = Value(n), mRolloutDone
	} else if r.Gym.RolloutSpans.Count > 0 {
		e.Rollouts, e.RolloutsSource = r.Gym.RolloutSpans.Count, spanRollout+" spans"
	} else if r.Gym.RolloutHistogram.Count > 0 {
		e.Rollouts, e.RolloutsSource = r.Gym.RolloutHistogram.Count, mRolloutMs+" count"
	}

	// Per GPU: its energy counter, else its power series.
	type dev struct {
		counter *series
		power   *series
	}
	var order []gpuDevice
	devs := map[gpuDevice]*dev{}
	for _, s := range a.order {
		if (s.key.metric != mEnergy || s.c == nil) && (s.key.metric != mPower || s.g == nil) {
			continue
		}
		d := gpuDevice{s.key.node, s.labels["gpu"], s.labels[aGPUInstance]}
		x := devs[d]
		if x == nil {
			x = &dev{}
			devs[d] = x
			order = append(order, d)
		}
		if s.key.metric == mEnergy {
			x.counter = s
		} else {
			x.power = s
		}
	}
	e.NotAttributable = a.gpuSharing()
	switch {
	case len(e.NotAttributable) > 0:
		e.Why = WhyNotAttributable
		e.Estimate = a.runEstimate()
		if e.Estimate != nil && e.Estimate.Joules.Known() && e.GenerationTokens.Known() && e.GenerationTokens > 0 {
			e.EstimatePer1kTokens = e.Estimate.Joules / e.GenerationTokens * 1000
		}
		return e
	case len(order) == 0 && len(a.byMetric(mGPUUtil)) > 0:
		e.Why = WhyNoPower
		return e
	case len(order) == 0:
		e.Why = WhyNoGPUs
		return e
	}
	joules := 0.0
	var first, last int64
	sources := map[string]bool{}
	for _, d := range order {
		x := devs[d]
		var j float64
		var f, l int64
		switch {
		case x.counter != nil && x.counter.c.n >= 2:
			c := x.counter.c
			j, f, l = (c.total()-c.firstAdj)/1000, c.firstMs, c.lastMs
			sources[SourceEnergyCounter] = true
		case x.power != nil && a.power[x.power] != nil && a.power[x.power].n >= 2:
			p := a.power[x.power]
			j, f, l = p.joules, p.firstMs, p.lastMs
			sources[SourcePower] = true
		default:
			e.Why = WhyTwoScrapes + " (" + d.String() + ")"
			return e
		}
		joules += j
		if first == 0 || f < first {
			first = f
		}
		if l > last {
			last = l
		}
		e.GPUs++
	}
	e.Joules, e.WindowSeconds = Value(joules), Value(float64(last-first)/1000)
	var src []string
	for _, s := range []string{SourceEnergyCounter, SourcePower} {
		if sources[s] {
			src = append(src, s)
		}
	}
	e.Source = strings.Join(src, " + ")
	if e.GenerationTokens.Known() && e.GenerationTokens > 0 {
		e.JoulesPer1kTokens = e.Joules / e.GenerationTokens * 1000
	}
	if e.Rollouts.Known() && e.Rollouts > 0 {
		e.JoulesPerRollout = e.Joules / e.Rollouts
	}
	return e
}

// runEstimate is the MIG estimate over the run: per node over its GPU
// series' samples (nil where a node's GPUs allow none).
func (a *aggregator) runEstimate() *Estimate {
	nodes := a.nodeGPUs()
	var names []string
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	var out *Estimate
	for _, n := range names {
		var t0, t1 int64
		for _, g := range nodes[n] {
			for _, sm := range []*sampled{g.counterSamples, g.powerSamples} {
				if sm == nil || len(sm.pts) == 0 {
					continue
				}
				if f := sm.pts[0].ms; t0 == 0 || f < t0 {
					t0 = f
				}
				t1 = max(t1, sm.pts[len(sm.pts)-1].ms)
			}
		}
		est := migEstimate(n, nodes[n], t0, t1)
		if est == nil {
			return nil
		}
		if out == nil {
			out = &Estimate{Method: MethodMIGShare}
		}
		out.Joules += est.Joules
		out.Method += strings.TrimPrefix(est.Method, MethodMIGShare)
		for _, w := range est.Verdict.Why {
			out.Verdict.add(w)
		}
	}
	if out != nil {
		out.Verdict.done()
	}
	return out
}

// energyLines writes the text report's energy section.
func (t *textOut) energyLines(r *Report) {
	e := r.Energy
	if e.Why == WhyNoGPUs {
		return
	}
	t.section("energy (dcgm-exporter)")
	if len(e.NotAttributable) > 0 {
		t.wrap(fmt.Sprintf("  %-24s ", "energy"), WhyNotAttributable+": DCGM's power and energy of a shared or MIG-partitioned GPU are not the job's alone (the GPUs above)")
		if x := e.Estimate; x != nil && x.Joules.Known() {
			line := fmt.Sprintf("%s J, AN ESTIMATE by the %s", f(x.Joules, 1), x.Method)
			if e.EstimatePer1kTokens.Known() {
				line += fmt.Sprintf("; %s J per 1,000 generation tokens", f(e.EstimatePer1kTokens, 2))
			}
			t.wrap(fmt.Sprintf("  %-24s ", "estimate"), line+"; "+verdictText(x.Verdict, false))
		}
		return
	}
	if !e.Joules.Known() {
		t.line("  %-24s - (%s)", "energy", e.Why)
		return
	}
	t.line("  %-24s %s J (%s Wh) over %s, %d %s", "energy", f(e.Joules, 1), f(e.Joules/3600, 3), dur(e.WindowSeconds), e.GPUs, plural(e.GPUs, "GPU"))
	t.wrap(fmt.Sprintf("  %-24s ", "from"), e.Source)
	tokens := "- (no vllm:generation_tokens_total)"
	if e.JoulesPer1kTokens.Known() {
		tokens = fmt.Sprintf("%s J (%s generation tokens, vllm:generation_tokens_total)", f(e.JoulesPer1kTokens, 2), f(e.GenerationTokens, 0))
	}
	t.line("  %-24s %s", "per 1,000 tokens", tokens)
	rollouts := "- (no rollouts counted)"
	if e.JoulesPerRollout.Known() {
		rollouts = fmt.Sprintf("%s J (%s rollouts, %s)", f(e.JoulesPerRollout, 2), f(e.Rollouts, 0), e.RolloutsSource)
	}
	t.line("  %-24s %s", "per rollout", rollouts)
}

// sharingLines writes the GPUs that are not the job's alone under the
// text report's GPU table (foldSharing).
func (t *textOut) sharingLines(r *Report) {
	if len(r.GPUSharing) == 0 {
		return
	}
	t.line("  not the job's alone (gpu_attribution):")
	for _, l := range foldSharing(r.GPUSharing) {
		t.wrap("    ", l)
	}
}

// foldSharing folds GPUSharing's lines ("<node> gpu N: <why>"): one line
// per node and reason ("gn1 gpu 0, gpu 1: <why>"), then the nodes with the
// same devices and reason on one line as a hostlist ("gn[1-64] gpu 0, gpu
// 1: <why>").
func foldSharing(sharing []string) []string {
	var keys []string
	names := map[string][]string{}
	for _, l := range sharing {
		name, why, _ := strings.Cut(l, ": ")
		node, dev, _ := strings.Cut(name, " ")
		k := node + "\x00" + why
		if _, ok := names[k]; !ok {
			keys = append(keys, k)
		}
		names[k] = append(names[k], dev)
	}
	var lines []string
	nodes := map[string][]string{}
	for _, k := range keys {
		node, why, _ := strings.Cut(k, "\x00")
		l := strings.Join(names[k], ", ") + ": " + why
		if nodes[l] == nil {
			lines = append(lines, l)
		}
		nodes[l] = append(nodes[l], node)
	}
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		out = append(out, slurm.CompressHostlist(nodes[l])+" "+l)
	}
	return out
}
