package inspect

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"gopkg.in/yaml.v3"
)

// Energy per node and Slurm step, and per Gym role, each figure with a
// verdict on whether to trust it.
//
// A step's window is its phase span (slurm.batch_script for the batch
// step, slurm.step for the others; the extern step, which spans the whole
// allocation, is left out). On each node the energy of the job's GPUs
// over that window comes from dcgm-exporter's
// DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (a counter in mJ since the driver
// loaded: NVIDIA/dcgm-exporter etc/default-counters.csv, commit b54068a)
// where the GPU has it, else from DCGM_FI_DEV_POWER_USAGE (a gauge in W)
// integrated. Where the node dir's state.json records the job's GPUs by
// device (gpumatch.go), a series is matched to them by its pci_bus_id;
// else a GPU is named by dcgm-exporter's UUID label (pci_bus_id, else its
// gpu index, where the files lack it; labels as rendered by
// internal/pkg/rendermetrics/render_metrics.go, commit 1f7abdb). Where the
// job's GPUs are MIG instances of its own, an estimate is given beside the
// refused figure (migestimate.go).
//
// The verdict follows the checks InferenceX applies before it publishes
// a window's energy: the GPU ids matched one to one between the window's
// ends, monotonic sample times, at most 3 s between power samples (power
// integration only: a counter is exact between any two reads), the
// window bracketed by samples; and, here, no counter reset inside the
// window and every GPU the job's alone (gpu_attribution "job").

// Reasons a figure is not trusted (Verdict.Why's entries start with one).
const (
	ReasonWindowUnknown   = "step window not known"
	ReasonNoSamples       = "no GPU samples"
	ReasonNotAttributable = WhyNotAttributable
	ReasonNotBracketed    = "window not bracketed by samples"
	ReasonNotMatched      = "GPU ids not matched one to one between the window's ends"
	ReasonNotMonotonic    = "sample times not monotonic"
	ReasonGap             = "gap between power samples above 3 s"
	ReasonReset           = "energy counter reset in the window"
	ReasonSharedNode      = "node's GPUs serve several roles"
	ReasonTokens          = "generation tokens not bracketed by samples"
)

// maxGapMs is the longest gap between two power samples a trusted
// integral allows (ms).
const maxGapMs = 3000

// maxSamples bounds the samples kept per energy, power or generation
// token series: past it every other one is dropped and then only every
// second new one kept (as a timeline is thinned), so a series of any
// length costs at most this many and still spans the run. A counter's
// increase between any two kept samples stays exact (its resets are
// carried); power samples further apart than 3 s make the verdict say so.
const maxSamples = 8192

// Verdict says whether a figure can be trusted, and if not why.
type Verdict struct {
	Trusted bool `json:"trusted"`
	// Why lists the reasons, each starting with one of the Reason*
	// constants followed by the particulars (": gn1 GPU-..., ...").
	Why []string `json:"why,omitempty"`
}

func (v *Verdict) add(reason string, detail ...string) {
	s := reason
	if len(detail) > 0 {
		s += ": " + strings.Join(detail, "; ")
	}
	for _, w := range v.Why {
		if w == s {
			return
		}
	}
	v.Why = append(v.Why, s)
}

func (v *Verdict) done() { v.Trusted = len(v.Why) == 0 }

// StepEnergy is the energy of the job's GPUs on one node over one Slurm
// step's window.
type StepEnergy struct {
	Node string `json:"node"`
	// Link is the chain link's job id ("" for the job itself); Restart
	// the run's slurm_job_restart_count (a requeued job's runs are
	// figures of their own); Step the step's id ("batch", "0", ...); Span
	// the phase span whose times are the window (slurm.batch_script or
	// slurm.step).
	Link    string `json:"link,omitempty"`
	Restart string `json:"restart_count,omitempty"`
	Step    string `json:"step"`
	Span    string `json:"span"`
	// Start and End are the window (null where the node did not know
	// them); WindowSeconds is End - Start (s).
	Start         *time.Time `json:"start"`
	End           *time.Time `json:"end"`
	WindowSeconds Value      `json:"window_seconds"`
	GPUEnergy
}

// GPUEnergy is the energy of a set of GPUs (a node's, or a role's nodes')
// over a window, with its verdict: the figure StepEnergy and RoleEnergy
// share (its fields are theirs in JSON).
type GPUEnergy struct {
	// Joules is the GPUs' energy (J) between the samples bracketing the
	// window (per GPU the last at or before its start and the first at or
	// after its end): from the energy counter its increase (mJ / 1000),
	// else the power samples integrated (trapezoids; W x s = J). Null
	// when the GPUs are not the job's alone or no GPU has samples.
	Joules Value `json:"joules"`
	// BracketSeconds is the most time, over the GPUs, the bracketing
	// samples add to the window (s: its start minus the sample before it
	// plus the sample after its end minus the end). ErrorJoules bounds
	// the counter's figure (J): the window's true energy lies between
	// Joules - ErrorJoules (the increase between the samples inside the
	// window) and Joules. Null for power integration, whose error the
	// samples do not bound.
	ErrorJoules    Value `json:"error_joules"`
	BracketSeconds Value `json:"bracket_seconds"`
	// MaxGapSeconds is the longest time between consecutive samples of a
	// GPU in the window (s).
	MaxGapSeconds Value `json:"max_gap_seconds"`
	// Source is SourceEnergyCounter, SourcePower, or both joined by " + ".
	Source string `json:"source,omitempty"`
	// GPUs names the GPUs summed ("UUID GPU-...", "pci_bus_id ...", or
	// "gpu 0" where the files have neither); MatchedBy the label they were
	// matched by between the window's ends.
	GPUs      []string `json:"gpus"`
	MatchedBy string   `json:"matched_by,omitempty"`
	Verdict   Verdict  `json:"verdict"`
	// Estimate is given where Joules is refused because the GPUs are MIG
	// instances of the job's (migestimate.go): always an estimate, with
	// its method; nil otherwise.
	Estimate *Estimate `json:"estimate,omitempty"`
}

// RoleEnergy is the energy of a Gym role's GPUs over one step's window,
// per 1,000 of its generation tokens.
type RoleEnergy struct {
	// Role is the model server's scrape job without its component
	// ("policy" of gym-vllm/policy); Producers the scrape jobs, Nodes the
	// nodes that serve it (whose GPUs are counted).
	Role      string   `json:"role"`
	Producers []string `json:"producers"`
	Nodes     []string `json:"nodes"`
	// Step is the step's id (of the run Restart, a requeued job's
	// slurm_job_restart_count); Start and End its window over every node
	// that ran it (the earliest start to the latest end, node clocks
	// compared as they are).
	Restart string     `json:"restart_count,omitempty"`
	Step    string     `json:"step"`
	Start   *time.Time `json:"start"`
	End     *time.Time `json:"end"`
	GPUEnergy
	// GenerationTokens is vllm:generation_tokens_total's increase
	// between the samples bracketing the window on the role's servers
	// (from zero where a server's first sample is inside the window; to
	// its last sample where that is before the window's end, a lower
	// bound the verdict names); JoulesPer1kTokens is Joules per 1,000 of
	// them (J). Null when either is.
	GenerationTokens  Value `json:"generation_tokens"`
	JoulesPer1kTokens Value `json:"joules_per_1k_generation_tokens"`
	// EstimatePer1kTokens is GPUEnergy.Estimate per 1,000 of the
	// generation tokens (J): an estimate, null without one.
	EstimatePer1kTokens Value `json:"estimate_per_1k_generation_tokens"`
}

// EnergyMatching says how the GPUs were matched to the job.
type EnergyMatching struct {
	// By is the label that names a GPU in the figures (UUID, pci_bus_id,
	// or gpu: the index, only where the files have neither).
	By string `json:"by"`
	// Nodes says per node how its collector kept the job's GPUs (from
	// the filter/dcgm condition of the node dir's collector.yaml).
	Nodes []NodeMatching `json:"nodes,omitempty"`
	// Note says what is not matched by device.
	Note string `json:"note"`
}

// NodeMatching is how one node's collector kept the job's GPUs.
type NodeMatching struct {
	Node string `json:"node"`
	// KeptBy is KeptByUUID, KeptByIndex, KeptByMIG or KeptByAll.
	KeptBy string `json:"kept_by"`
}

// How a node's collector kept the job's GPUs (helper/render/gpus.go).
const (
	// KeptByUUID: by the UUIDs Slurm named in CUDA_VISIBLE_DEVICES (and
	// MIG instances by parent UUID and GPU instance id): by device.
	KeptByUUID = "UUID"
	// KeptByIndex: by Slurm's indexes (SLURM_JOB_GPUS) as dcgm-exporter's
	// gpu label: in index order.
	KeptByIndex = "index"
	// KeptByMIG: every MIG instance of the node (Slurm named them by MIG
	// UUID only).
	KeptByMIG = "every MIG instance"
	// KeptByAll: no filter (Slurm named no GPU on the node).
	KeptByAll = "every GPU"
	// KeptByPCI: by pci_bus_id, the PCI bus ids the supervisor read from
	// the NVIDIA driver for the devices Slurm named: by device.
	KeptByPCI = "pci_bus_id"
)

// matchNoteByDevice: every node's state.json recorded the job's GPUs.
const matchNoteByDevice = "every GPU matched by device: the supervisor recorded each of the job's GPUs' minor number and PCI bus id " +
	"from the NVIDIA driver (/proc/driver/nvidia/gpus/<bus>/information; state.json gpus), a UUID as the driver's GPU UUID, " +
	"a GRES index (SLURM_JOB_GPUS: the GPU's place in the node's GRES list) as the minor of its device file in the node's " +
	"gres.conf (state.json gpus by \"gres.conf\"), or, where the prolog could not map it (gres.conf with AutoDetect, or not " +
	"read: by \"minor\", the prolog's line in slurmd's log says why), read as the minor itself, right only for a gres.conf " +
	"listing /dev/nvidia0.. in order; dcgm-exporter's series are matched by pci_bus_id"

// matchNote: what inspect cannot check from the files.
const matchNote = "a GPU is matched by device where Slurm named it by UUID (Slurm 25.11 and later, or MIG devices) or where the " +
	"supervisor recorded the job's GPUs from the NVIDIA driver (state.json gpus; not on every node here); " +
	"where it named Slurm's indexes (SLURM_JOB_GPUS) the collector matched them to dcgm-exporter's gpu label in index order, " +
	"and Slurm's order (the node's GRES list) and DCGM's (NVML's, by PCI bus) can differ. " +
	"dcgm-exporter's device label (nvidia<DCGM GPU id>) is not the minor number; the supervisor records each GPU's minor and " +
	"PCI bus id from the node's /proc/driver/nvidia/gpus/<PCI bus id>/information where it can read them for every device " +
	"Slurm named, and then every GPU is matched by device (dcgm-exporter's pci_bus_id)"

// keptBy reads how the collector of node dir dir kept the job's GPUs
// ("" when the dir has no collector.yaml).
func keptBy(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, jobdir.ConfigFile))
	if err != nil {
		return ""
	}
	var cfg struct {
		Processors map[string]struct {
			Metrics struct {
				Datapoint []string `yaml:"datapoint"`
			} `yaml:"metrics"`
		} `yaml:"processors"`
	}
	if yaml.Unmarshal(data, &cfg) != nil {
		return ""
	}
	f, ok := cfg.Processors["filter/dcgm"]
	if !ok || len(f.Metrics.Datapoint) == 0 {
		return KeptByAll
	}
	cond := strings.Join(f.Metrics.Datapoint, " ")
	switch {
	case strings.Contains(cond, `attributes["pci_bus_id"]`):
		return KeptByPCI
	case strings.Contains(cond, `attributes["gpu"] == "`):
		return KeptByIndex
	case strings.Contains(cond, `attributes["UUID"] == "`):
		return KeptByUUID
	case strings.Contains(cond, `attributes["GPU_I_ID"] != nil`):
		return KeptByMIG
	}
	return KeptByAll
}

type sample struct {
	ms                int64
	v                 float64
	resets, unordered int
}

// sampled is one series' kept samples, in time order.
type sampled struct {
	pts     []sample
	stride  int // keep every stride-th sample offered
	seen    int
	lastRaw float64 // a counter's last value as read
	offset  float64 // a counter's values before each reset, summed
	resets  int
	unorder int
}

// keepSample keeps a sample of an energy, power or generation token
// series for the per-step figures; counter says it is a cumulative
// counter.
func (a *aggregator) keepSample(s *series, ms int64, v float64, counter bool) {
	if math.IsNaN(v) {
		return
	}
	if a.samples == nil {
		a.samples = map[*series]*sampled{}
	}
	x := a.samples[s]
	if x == nil {
		x = &sampled{stride: 1}
		a.samples[s] = x
	}
	if n := len(x.pts); n > 0 && ms <= x.pts[n-1].ms {
		x.unorder++ // a repeated or older sample: not kept, counted
		return
	}
	raw := v
	if counter {
		if x.seen > 0 && raw < x.lastRaw {
			x.offset += x.lastRaw
			x.resets++
		}
		x.lastRaw = raw
		v = raw + x.offset
	}
	x.seen++
	p := sample{ms, v, x.resets, x.unorder}
	if (x.seen-1)%x.stride != 0 {
		// Off the stride: the newest sample takes the last slot, so the
		// series ends at its last sample.
		x.pts[len(x.pts)-1] = p
		return
	}
	if len(x.pts) == maxSamples {
		k := 0
		for i := 0; i < len(x.pts); i += 2 {
			x.pts[k] = x.pts[i]
			k++
		}
		x.pts = x.pts[:k]
		x.stride *= 2
	}
	x.pts = append(x.pts, p)
}

// window is one step's window on a node.
type window struct {
	node, link, restart, step, span string
	start, end                      *time.Time
}

func msOf(t *time.Time) int64 { return t.UnixMilli() }

// stepWindows lists every node's step windows from the phases.
func stepWindows(phases []NodePhases) []window {
	var out []window
	for _, np := range phases {
		var batch *window
		var ws []window
		for _, p := range np.Phases {
			switch {
			case p.Name == phaseBatch:
				w := window{np.Node, np.Link, np.Restart, "batch", phaseBatch, p.Start, p.End}
				batch = &w
			case p.Name == phaseStep && p.Step != "extern" && p.Step != "":
				ws = append(ws, window{np.Node, np.Link, np.Restart, p.Step, phaseStep, p.Start, p.End})
			}
		}
		for _, w := range ws {
			if w.step == "batch" && batch != nil {
				w = *batch
				batch = nil
			}
			out = append(out, w)
		}
		if batch != nil {
			out = append(out, *batch)
		}
	}
	return out
}

// gpuSeries is one GPU (or MIG instance) of a node: its id and its
// energy and power series.
type gpuSeries struct {
	dev    gpuDevice
	id, by string
	why    string // not the job's alone: why
	// jobInstance: a MIG instance that is the job's exactly (marked
	// "mig", or recorded by device); parent names its GPU (the series of
	// every instance of one GPU repeat its power and energy); profile is
	// its GPU_I_PROFILE, model the GPU's modelName (migestimate.go).
	jobInstance            bool
	parent, profile, model string
	counter, power         *series
	counterSamples         *sampled
	powerSamples           *sampled
}

// gpuID names a GPU by the first label that names a device: UUID (or the
// old namespace's uuid), pci_bus_id, else its index.
func gpuID(l map[string]string) (id, by string) {
	for _, k := range []string{"UUID", "uuid", "pci_bus_id"} {
		if v := l[k]; v != "" {
			by = k
			if k == "uuid" {
				by = "UUID"
			}
			id = by + " " + v
			if gi := l[aGPUInstance]; gi != "" {
				id += " instance " + gi
			}
			return id, by
		}
	}
	id = "gpu " + l["gpu"]
	if gi := l[aGPUInstance]; gi != "" {
		id += " instance " + gi
	}
	return id, "gpu"
}

// nodeGPUs lists each node's GPUs with their series, in file order.
func (a *aggregator) nodeGPUs() map[string][]*gpuSeries {
	out := map[string][]*gpuSeries{}
	by := map[gpuDevice]*gpuSeries{}
	for _, s := range a.order {
		if (s.key.metric != mEnergy || s.c == nil) && (s.key.metric != mPower || s.g == nil) {
			continue
		}
		d := gpuDevice{s.key.node, s.labels["gpu"], s.labels[aGPUInstance]}
		g := by[d]
		if g == nil {
			g = &gpuSeries{dev: d, profile: s.labels[aGPUProfile], model: s.labels["modelName"]}
			g.why, g.id, g.by = a.seriesWhy(s.key.node, s.labels)
			g.jobInstance = d.instance != "" && g.why == whyJobInstance
			g.parent, _ = gpuID(map[string]string{"UUID": s.labels["UUID"], "uuid": s.labels["uuid"], aPCIBusID: s.labels[aPCIBusID], "gpu": s.labels["gpu"]})
			by[d] = g
			out[d.node] = append(out[d.node], g)
		}
		if s.key.metric == mEnergy {
			g.counter, g.counterSamples = s, a.samples[s]
		} else {
			g.power, g.powerSamples = s, a.samples[s]
		}
	}
	// A GPU the supervisor recorded for the job that has no series: a
	// GPU of the figure without samples (the verdict names it).
	for node, devs := range a.recordedGPUs() {
		if len(out[node]) == 0 {
			continue
		}
		seen := map[string]bool{}
		for _, g := range out[node] {
			seen[g.id] = true
		}
		for _, dv := range devs {
			if id := deviceID(dv); !seen[id] {
				out[node] = append(out[node], &gpuSeries{dev: gpuDevice{node, "", dv.Instance}, id: id, by: aPCIBusID})
			}
		}
	}
	return out
}

// bracket finds, in pts, the last sample at or before t0 (b0, -1 when
// none) and the first at or after t1 (b1, -1 when none), and whether a
// sample out of time order was read between them.
func bracket(pts []sample, t0, t1 int64) (b0, b1 int, monotonic bool) {
	b0, b1 = -1, -1
	for i, p := range pts {
		if p.ms <= t0 {
			b0 = i
		}
		if p.ms >= t1 && b1 < 0 {
			b1 = i
		}
	}
	if len(pts) == 0 {
		return b0, b1, true
	}
	lo, hi := max(b0, 0), b1
	if hi < 0 {
		hi = len(pts) - 1
	}
	return b0, b1, pts[hi].unordered == pts[lo].unordered
}

// counterIncrease is a counter's increase from kept sample i to j (after
// a reset the value counts from zero, as Prometheus' increase() does) and
// whether it reset between them.
func counterIncrease(pts []sample, i, j int) (inc float64, reset bool) {
	return pts[j].v - pts[i].v, pts[j].resets > pts[i].resets
}

// bracketedIncrease is a counter's increase between the samples b0 and
// b1 that bracket the window [t0, t1] (ms), with its error bound: what
// the bracketing samples may add to the window's own increase (the
// increase less that between the samples inside the window, the first
// after t0 and the last before t1; the whole increase when none lies
// inside), and whether the counter reset between b0 and b1. In the
// counter's unit.
func bracketedIncrease(pts []sample, b0, b1 int, t0, t1 int64) (inc, bound float64, reset bool) {
	inc, reset = counterIncrease(pts, b0, b1)
	i0, i1 := b0, b1
	if pts[b0].ms < t0 && b0+1 <= b1 {
		i0 = b0 + 1
	}
	if pts[b1].ms > t1 && b1-1 >= b0 {
		i1 = b1 - 1
	}
	if i1 <= i0 {
		return inc, inc, reset
	}
	inner, _ := counterIncrease(pts, i0, i1)
	return inc, inc - inner, reset
}

// powerIntegral integrates power samples from b0 to b1 (trapezoids
// between consecutive distinct samples; W x s = J) and finds the longest
// gap between them (ms).
func powerIntegral(pts []sample, b0, b1 int) (joules float64, gapMs int64) {
	for i := b0; i < b1; i++ {
		p, q := pts[i], pts[i+1]
		if q.ms <= p.ms {
			continue
		}
		gapMs = max(gapMs, q.ms-p.ms)
		joules += (p.v + q.v) / 2 * float64(q.ms-p.ms) / 1000
	}
	return joules, gapMs
}

// gpusOver computes the energy of gpus over [t0, t1] (unix ms).
func gpusOver(node string, gpus []*gpuSeries, t0, t1 int64) GPUEnergy {
	nan := Value(math.NaN())
	f := GPUEnergy{Joules: nan, ErrorJoules: nan, BracketSeconds: nan, MaxGapSeconds: nan, GPUs: []string{}}
	if len(gpus) == 0 {
		f.Verdict.add(ReasonNoSamples, node)
		f.Verdict.done()
		return f
	}
	// The GPUs that are not the job's alone, one entry per reason.
	var notJob, whys []string
	ids := map[string][]string{}
	for _, g := range gpus {
		if g.why != "" {
			if ids[g.why] == nil {
				whys = append(whys, g.why)
			}
			ids[g.why] = append(ids[g.why], g.id)
		}
	}
	for _, w := range whys {
		notJob = append(notJob, node+" "+strings.Join(ids[w], ", ")+": "+w)
	}
	if len(notJob) > 0 {
		for _, g := range gpus {
			f.GPUs = append(f.GPUs, g.id)
		}
		f.Verdict.add(ReasonNotAttributable, notJob...)
		f.Verdict.done()
		f.Estimate = migEstimate(node, gpus, t0, t1)
		return f
	}
	joules, errJ, bracketMs, gapMs := 0.0, 0.0, int64(0), int64(0)
	counterUsed, powerUsed, errKnown := false, false, true
	atStart, atEnd := map[string]int{}, map[string]int{}
	var missingStart, missingEnd, unordered, resets, gaps []string
	bys := map[string]bool{}
	for _, g := range gpus {
		f.GPUs = append(f.GPUs, g.id)
		bys[g.by] = true
		var pts []sample
		stride := 1
		useCounter := g.counterSamples != nil && len(g.counterSamples.pts) >= 2
		if useCounter {
			pts, stride = g.counterSamples.pts, g.counterSamples.stride
		} else if g.powerSamples != nil {
			pts, stride = g.powerSamples.pts, g.powerSamples.stride
		}
		b0, b1, mono := bracket(pts, t0, t1)
		if b0 >= 0 {
			atStart[g.id]++
		} else {
			missingStart = append(missingStart, g.id)
		}
		if b1 >= 0 {
			atEnd[g.id]++
		} else {
			missingEnd = append(missingEnd, g.id)
		}
		if !mono {
			unordered = append(unordered, g.id)
		}
		if b0 < 0 || b1 < 0 {
			continue
		}
		for i := b0 + 1; i <= b1; i++ {
			if d := pts[i].ms - pts[i-1].ms; d > gapMs {
				gapMs = d
			}
		}
		if useCounter {
			counterUsed = true
			inc, bound, reset := bracketedIncrease(pts, b0, b1, t0, t1)
			if reset {
				resets = append(resets, g.id)
			}
			joules += inc / 1000
			errJ += bound / 1000
			bracketMs = max(bracketMs, (t0-pts[b0].ms)+(pts[b1].ms-t1))
			continue
		}
		powerUsed, errKnown = true, false
		bracketMs = max(bracketMs, (t0-pts[b0].ms)+(pts[b1].ms-t1))
		j, gap := powerIntegral(pts, b0, b1)
		joules += j
		if gap > maxGapMs {
			d := fmt.Sprintf("%s %.1f s", g.id, float64(gap)/1000)
			if stride > 1 {
				d += fmt.Sprintf(" (a long series: inspect kept every %dth of its %d samples)", stride, maxSamples*stride)
			}
			gaps = append(gaps, d)
		}
	}
	for id, n := range atStart {
		if n > 1 {
			f.Verdict.add(ReasonNotMatched, fmt.Sprintf("%s %s names %d series", node, id, n))
		}
	}
	if len(missingStart)+len(missingEnd) == 2*len(gpus) || len(missingStart) == len(gpus) || len(missingEnd) == len(gpus) {
		f.Verdict.add(ReasonNotBracketed, describeMissing(node, missingStart, missingEnd)...)
	} else if len(missingStart) > 0 || len(missingEnd) > 0 {
		f.Verdict.add(ReasonNotMatched, describeMissing(node, missingStart, missingEnd)...)
	}
	if len(unordered) > 0 {
		f.Verdict.add(ReasonNotMonotonic, node+" "+strings.Join(unordered, ", "))
	}
	if len(gaps) > 0 {
		f.Verdict.add(ReasonGap, node+" "+strings.Join(gaps, ", ")+": integrating power needs a sample every 3 s or less (otel.scrape_interval_seconds: 3 or less); dcgm-exporter's energy counter needs none")
	}
	if len(resets) > 0 {
		f.Verdict.add(ReasonReset, node+" "+strings.Join(resets, ", ")+" (the driver reloaded or the GPU was reset: the energy before the reset's first sample is not counted)")
	}
	if !counterUsed && !powerUsed {
		f.Verdict.done()
		return f
	}
	f.Joules = Value(joules)
	f.MaxGapSeconds = Value(float64(gapMs) / 1000)
	f.BracketSeconds = Value(float64(bracketMs) / 1000)
	if errKnown {
		f.ErrorJoules = Value(errJ)
	}
	var src []string
	if counterUsed {
		src = append(src, SourceEnergyCounter)
	}
	if powerUsed {
		src = append(src, SourcePower)
	}
	f.Source = strings.Join(src, " + ")
	for _, b := range []string{"UUID", "pci_bus_id", "gpu"} {
		if bys[b] {
			f.MatchedBy = b
			break
		}
	}
	f.Verdict.done()
	return f
}

func describeMissing(node string, start, end []string) []string {
	var out []string
	if len(start) > 0 {
		out = append(out, fmt.Sprintf("%s: no sample at or before the start of %s", node, strings.Join(start, ", ")))
	}
	if len(end) > 0 {
		out = append(out, fmt.Sprintf("%s: no sample at or after the end of %s", node, strings.Join(end, ", ")))
	}
	return out
}

// roleOf is a model server's role: its scrape job without the component
// ("gym-vllm/policy" -> "policy").
func roleOf(producer string) string {
	if i := strings.LastIndex(producer, "/"); i >= 0 && i < len(producer)-1 {
		return producer[i+1:]
	}
	return producer
}

// stepEnergy computes the per-node-and-step and per-role figures.
func (a *aggregator) stepEnergy(phases []NodePhases) ([]StepEnergy, []RoleEnergy, EnergyMatching) {
	nan := Value(math.NaN())
	gpus := a.nodeGPUs()
	if len(gpus) == 0 {
		return []StepEnergy{}, []RoleEnergy{}, EnergyMatching{}
	}
	match := EnergyMatching{Note: matchNote}
	for _, d := range a.dirs {
		if k := keptBy(d.src.Dir); k != "" && d.node != "" {
			match.Nodes = append(match.Nodes, NodeMatching{d.node, k})
		}
	}
	bys := map[string]bool{}
	for _, gs := range gpus {
		for _, g := range gs {
			bys[g.by] = true
		}
	}
	rec := a.recordedGPUs()
	byDevice := len(rec) > 0
	for n := range gpus {
		if rec[n] == nil {
			byDevice = false
		}
	}
	if byDevice {
		match.Note = matchNoteByDevice
		bys = map[string]bool{aPCIBusID: true}
	}
	for _, b := range []string{"UUID", "pci_bus_id", "gpu"} {
		if bys[b] {
			match.By = b
			break
		}
	}
	steps := []StepEnergy{}
	// Each step's window over every node that ran it.
	type span struct {
		t0, t1 *time.Time
		known  bool
	}
	type runStep struct{ restart, step string }
	var stepOrder []runStep
	global := map[runStep]*span{}
	for _, w := range stepWindows(phases) {
		se := StepEnergy{Node: w.node, Link: w.link, Restart: w.restart, Step: w.step, Span: w.span, Start: w.start, End: w.end, WindowSeconds: nan}
		if w.start == nil || w.end == nil {
			se.GPUEnergy = GPUEnergy{Joules: nan, ErrorJoules: nan, BracketSeconds: nan, MaxGapSeconds: nan, GPUs: []string{}}
			which := "start"
			if w.start != nil {
				which = "end"
			}
			se.Verdict.add(ReasonWindowUnknown, fmt.Sprintf("%s step %s: its %s was not seen", w.node, w.step, which))
			se.Verdict.done()
		} else {
			se.WindowSeconds = Value(float64(w.end.Sub(*w.start)) / 1e9)
			se.GPUEnergy = gpusOver(w.node, gpus[w.node], msOf(w.start), msOf(w.end))
		}
		steps = append(steps, se)
		if w.link != "" {
			continue
		}
		k := runStep{w.restart, w.step}
		g := global[k]
		if g == nil {
			g = &span{known: true}
			global[k] = g
			stepOrder = append(stepOrder, k)
		}
		if w.start == nil || w.end == nil {
			g.known = false
			continue
		}
		if g.t0 == nil || w.start.Before(*g.t0) {
			g.t0 = w.start
		}
		if g.t1 == nil || w.end.After(*g.t1) {
			g.t1 = w.end
		}
	}
	// The roles: the nodes each model server's generation tokens come from.
	type roleAcc struct {
		producers []string
		nodes     []string
		series    []*series
	}
	roles := map[string]*roleAcc{}
	var roleOrder []string
	nodeRoles := map[string][]string{}
	for _, s := range a.byMetric(mGenTokens) {
		r := roleOf(s.key.producer)
		x := roles[r]
		if x == nil {
			x = &roleAcc{}
			roles[r] = x
			roleOrder = append(roleOrder, r)
		}
		if !contains(x.producers, s.key.producer) {
			x.producers = append(x.producers, s.key.producer)
		}
		if !contains(x.nodes, s.key.node) {
			x.nodes = append(x.nodes, s.key.node)
		}
		if !contains(nodeRoles[s.key.node], r) {
			nodeRoles[s.key.node] = append(nodeRoles[s.key.node], r)
		}
		x.series = append(x.series, s)
	}
	sort.Strings(roleOrder)
	out := []RoleEnergy{}
	for _, k := range stepOrder {
		g, step := global[k], k.step
		for _, role := range roleOrder {
			x := roles[role]
			re := RoleEnergy{Role: role, Producers: x.producers, Nodes: x.nodes, Restart: k.restart, Step: step, Start: g.t0, End: g.t1,
				GenerationTokens: nan, JoulesPer1kTokens: nan, EstimatePer1kTokens: nan}
			re.GPUEnergy = GPUEnergy{Joules: nan, ErrorJoules: nan, BracketSeconds: nan, MaxGapSeconds: nan, GPUs: []string{}}
			if !g.known || g.t0 == nil {
				re.Verdict.add(ReasonWindowUnknown, "step "+step+": its start or end was not seen on a node")
				re.Verdict.done()
				out = append(out, re)
				continue
			}
			t0, t1 := msOf(g.t0), msOf(g.t1)
			joules, errJ, bracketS, gapS := 0.0, 0.0, 0.0, 0.0
			errKnown, ok := true, true
			var srcs []string
			// The MIG estimate: every node's figure measured or estimated.
			est, estOK := &Estimate{Method: MethodMIGShare}, true
			for _, n := range x.nodes {
				if rs := nodeRoles[n]; len(rs) > 1 {
					re.Verdict.add(ReasonSharedNode, fmt.Sprintf("%s serves %s: its GPUs cannot be split between them", n, strings.Join(rs, ", ")))
					ok = false
				}
				f := gpusOver(n, gpus[n], t0, t1)
				switch {
				case f.Joules.Known():
					est.Joules += f.Joules
				case f.Estimate != nil && f.Estimate.Joules.Known():
					est.Joules += f.Estimate.Joules
					est.Method += strings.TrimPrefix(f.Estimate.Method, MethodMIGShare)
					for _, w := range f.Estimate.Verdict.Why {
						est.Verdict.add(w)
					}
				default:
					estOK = false
				}
				re.GPUs = append(re.GPUs, f.GPUs...)
				for _, w := range f.Verdict.Why {
					re.Verdict.add(w)
				}
				if !f.Joules.Known() {
					ok = false
					continue
				}
				joules += float64(f.Joules)
				if f.ErrorJoules.Known() {
					errJ += float64(f.ErrorJoules)
				} else {
					errKnown = false
				}
				bracketS = math.Max(bracketS, float64(f.BracketSeconds))
				gapS = math.Max(gapS, float64(f.MaxGapSeconds))
				for _, s := range strings.Split(f.Source, " + ") {
					if !contains(srcs, s) {
						srcs = append(srcs, s)
					}
				}
				if re.MatchedBy == "" {
					re.MatchedBy = f.MatchedBy
				}
			}
			// Tokens over the same window.
			tokens := 0.0
			for _, s := range x.series {
				sm := a.samples[s]
				if sm == nil || len(sm.pts) == 0 {
					continue
				}
				b0, b1, mono := bracket(sm.pts, t0, t1)
				if !mono {
					re.Verdict.add(ReasonNotMonotonic, s.key.node+" "+s.key.producer+" "+mGenTokens)
				}
				if b1 < 0 {
					// The server's last sample is before the window's end
					// (a server that ended with the step): what it made
					// after that sample is not counted, the tokens are a
					// lower bound.
					b1 = len(sm.pts) - 1
					re.Verdict.add(ReasonTokens, fmt.Sprintf("%s %s: its last sample is %s before the end: the tokens after it are not counted",
						s.key.node, s.key.producer, dur(Value(float64(t1-sm.pts[b1].ms)/1000))))
				}
				if b0 < 0 {
					// Its first sample is inside the window: from zero.
					inc, _ := counterIncrease(sm.pts, 0, b1)
					tokens += inc + sm.pts[0].v
					continue
				}
				inc, _ := counterIncrease(sm.pts, b0, b1)
				tokens += inc
			}
			re.GenerationTokens = Value(tokens)
			if !ok && estOK && est.Method != MethodMIGShare {
				for _, w := range re.Verdict.Why {
					if !strings.HasPrefix(w, ReasonNotAttributable) {
						est.Verdict.add(w)
					}
				}
				est.Verdict.done()
				re.Estimate = est
				if re.GenerationTokens > 0 {
					re.EstimatePer1kTokens = est.Joules / re.GenerationTokens * 1000
				}
			}
			if ok {
				re.Joules = Value(joules)
				re.MaxGapSeconds, re.BracketSeconds = Value(gapS), Value(bracketS)
				if errKnown {
					re.ErrorJoules = Value(errJ)
				}
				re.Source = strings.Join(srcs, " + ")
				if re.GenerationTokens.Known() && re.GenerationTokens > 0 {
					re.JoulesPer1kTokens = re.Joules / re.GenerationTokens * 1000
				}
			}
			re.Verdict.done()
			out = append(out, re)
		}
	}
	return steps, out, match
}

// figureText is one figure in a line: "1234.5 J (-0.8 J)" or "- (why)".
func figureText(fg GPUEnergy) string {
	if !fg.Joules.Known() {
		if x := fg.Estimate; x != nil && x.Joules.Known() {
			return fmt.Sprintf("- (AN ESTIMATE: %s J by the %s; %s)", f(x.Joules, 1), x.Method, verdictText(x.Verdict, false))
		}
		return "-"
	}
	s := f(fg.Joules, 1) + " J"
	switch {
	case fg.ErrorJoules.Known() && fg.BracketSeconds > 0:
		s += fmt.Sprintf(" (the window's own: %s to %s J; samples %s beyond it)", f(fg.Joules-fg.ErrorJoules, 1), f(fg.Joules, 1), dur(fg.BracketSeconds))
	case fg.BracketSeconds > 0:
		s += fmt.Sprintf(" (samples %s beyond the window)", dur(fg.BracketSeconds))
	}
	switch fg.Source {
	case SourceEnergyCounter:
		s += ", counter"
	case SourcePower:
		s += ", power"
	case "":
	default:
		s += ", counter + power"
	}
	return s
}

// runName names a requeued job's run ("" for the first).
func runName(restart string) string {
	if restart == "" || restart == "0" {
		return ""
	}
	return " run " + restart
}

// verdictText is a verdict in a line; short leaves out the GPUs that are
// not the job's alone (the steps' lines above name them).
func verdictText(v Verdict, short bool) string {
	if v.Trusted {
		return "trusted"
	}
	var why []string
	seen := map[string]bool{}
	for _, w := range v.Why {
		if short && strings.HasPrefix(w, ReasonNotAttributable+": ") {
			w = ReasonNotAttributable + " (the GPUs above)"
		}
		if !seen[w] { // once, however many nodes' GPUs gave it
			seen[w] = true
			why = append(why, w)
		}
	}
	return "NOT TRUSTED: " + strings.Join(why, "; ")
}

// foldNodeReasons folds the reasons of a verdict over several nodes (a
// role's): the reasons of one kind (but ReasonNotAttributable's, which
// verdictText's short form writes once) (the text before its first ": ") that
// each name one of nodes (": <node> ") become one, "<kind> on N nodes
// <hostlist>, e.g. <the first>", when more than two nodes give it; the
// others stay as they are, in their order.
func foldNodeReasons(v Verdict, nodes []string) Verdict {
	if v.Trusted || len(v.Why) <= 2 {
		return v
	}
	kindOf := func(w string) (kind, node string) {
		k, rest, ok := strings.Cut(w, ": ")
		if !ok || k == ReasonNotAttributable { // verdictText's short form says it once
			return "", ""
		}
		for _, n := range nodes {
			if strings.HasPrefix(rest, n+" ") || strings.HasPrefix(rest, n+":") {
				return k, n
			}
		}
		return "", ""
	}
	byKind := map[string][]string{}
	for _, w := range v.Why {
		if k, n := kindOf(w); n != "" {
			byKind[k] = append(byKind[k], n)
		}
	}
	out := Verdict{Trusted: v.Trusted}
	done := map[string]bool{}
	for _, w := range v.Why {
		k, n := kindOf(w)
		switch {
		case n == "" || len(byKind[k]) <= 2:
			out.Why = append(out.Why, w)
		case !done[k]:
			done[k] = true
			ns := byKind[k]
			out.Why = append(out.Why, fmt.Sprintf("%s on %d nodes %s, e.g. %s", k, len(ns), slurm.CompressHostlist(dedup(ns)), w))
		}
	}
	return out
}

// stepEnergyLines writes the text report's energy per step and per role.
func (t *textOut) stepEnergyLines(r *Report) {
	if len(r.StepEnergy) == 0 && len(r.RoleEnergy) == 0 {
		return
	}
	t.section("energy per step and role (dcgm-exporter)")
	if m := r.EnergyMatching; m.By != "" {
		// The nodes that kept their GPUs alike, as one hostlist each.
		var kept, order []string
		by := map[string][]string{}
		for _, n := range m.Nodes {
			if by[n.KeptBy] == nil {
				order = append(order, n.KeptBy)
			}
			by[n.KeptBy] = append(by[n.KeptBy], n.Node)
		}
		for _, k := range order {
			kept = append(kept, slurm.CompressHostlist(by[k])+" by "+k)
		}
		line := m.By + " label"
		if len(kept) > 0 {
			line += "; the job's GPUs kept on " + strings.Join(kept, ", ")
		}
		t.wrap(fmt.Sprintf("  %-24s ", "GPUs named by"), line+"; "+m.Note)
	}
	shown := r.StepEnergy
	if tb := r.htmlTables()["step-energy"]; tb.Aggregated {
		// Past maxTableRows node windows: per step its figures' min,
		// median and max over the nodes, the verdicts folded into
		// hostlists, then the outliers' lines.
		t.aggLines(tb, "node windows")
		t.stepVerdictLines(r.StepEnergy)
		shown = nil
		for _, i := range tb.OutlierRows {
			shown = append(shown, r.StepEnergy[i])
		}
	}
	for _, se := range shown {
		name := se.Node + runName(se.Restart) + " step " + se.Step
		if se.Link != "" {
			name = se.Node + " link " + se.Link + " step " + se.Step
		}
		w := "window not known"
		if se.WindowSeconds.Known() {
			w = "over " + dur(se.WindowSeconds)
		}
		t.wrap(fmt.Sprintf("  %-24s ", name), fmt.Sprintf("%s %s, %d %s; %s", figureText(se.GPUEnergy), w,
			len(se.GPUs), plural(len(se.GPUs), "GPU"), verdictText(se.Verdict, false)))
	}
	for _, re := range r.RoleEnergy {
		name := "role " + re.Role + runName(re.Restart) + " step " + re.Step
		tok := "- per 1,000 tokens"
		if re.JoulesPer1kTokens.Known() {
			tok = fmt.Sprintf("%s J per 1,000 tokens (%s generation tokens)", f(re.JoulesPer1kTokens, 2), f(re.GenerationTokens, 0))
		} else if re.GenerationTokens.Known() {
			tok = fmt.Sprintf("- per 1,000 tokens (%s generation tokens)", f(re.GenerationTokens, 0))
		}
		t.wrap(fmt.Sprintf("  %-24s ", name), fmt.Sprintf("%s on %s, %s; %s", figureText(re.GPUEnergy), slurm.CompressHostlist(re.Nodes),
			tok, verdictText(foldNodeReasons(re.Verdict, re.Nodes), true)))
	}
}

// stepVerdictLines writes, per step, each verdict of its node windows (the
// node's name in it read as <node>) once, with the nodes that have it as a
// hostlist.
func (t *textOut) stepVerdictLines(rows []StepEnergy) {
	type key struct{ group, verdict string }
	var order []key
	nodes := map[key][]string{}
	for _, e := range rows {
		k := key{stepEnergyGroup(e), nodeless(verdictText(e.Verdict, true), e.Node)}
		if nodes[k] == nil {
			order = append(order, k)
		}
		nodes[k] = append(nodes[k], e.Node)
	}
	for _, k := range order {
		t.wrap(fmt.Sprintf("  %-24s ", k.group), fmt.Sprintf("%s on %d %s %s", k.verdict, len(nodes[k]), plural(len(nodes[k]), "node"), slurm.CompressHostlist(nodes[k])))
	}
}
