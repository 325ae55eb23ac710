package inspect

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// The job's cgroups: the series of the scrape job "cgroup" that the
// supervisor serves on each node (helper/supervise/cgroupmetrics.go, read
// by helper/cgroup/stats.go): per group (cgroup="job", "step" with its
// step id, "collector": the collector's own group) the CPU time and
// throttling, memory current, peak and limit, OOM kills and pressure
// (PSI) totals, each a series only where the node keeps it; what is not
// kept is one cgroup_not_kept{family, reason} series, never a 0. Only
// series whose resource carries the plugin's mark (contract.SourceKey,
// stamped by the node's collector on the supervisor's readings) count; the
// same names without it were sent by the job (JobLookalikes).

// The readings' producer (its series' service.name.override) and
// its metric names as the supervisor pushes them.
const (
	cgroupJob            = vocab.CgroupProducer
	mCgCPU               = vocab.CgroupCPUSeconds
	mCgPeriods           = vocab.CgroupCPUPeriods
	mCgThrottledPeriods  = vocab.CgroupThrottledPeriods
	mCgThrottledSeconds  = vocab.CgroupThrottledSeconds
	mCgMemCurrent        = vocab.CgroupMemoryCurrent
	mCgMemPeak           = vocab.CgroupMemoryPeak
	mCgMemLimit          = vocab.CgroupMemoryLimit
	mCgOOMKills          = vocab.CgroupOOMKills
	mCgCPUPressureSome   = vocab.CgroupCPUPressureSome
	mCgCPUPressureFull   = vocab.CgroupCPUPressureFull
	mCgMemPressureSome   = vocab.CgroupMemoryPressureSome
	mCgMemPressureFull   = vocab.CgroupMemoryPressureFull
	mCgIOPressureSome    = vocab.CgroupIOPressureSome
	mCgIOPressureFull    = vocab.CgroupIOPressureFull
	mCgNotKept           = vocab.CgroupNotKept
	cgFamilyAll          = vocab.CgroupFamilyAll
	maxCgroupGroups      = 4096 // groups kept over all nodes
	maxCgroupStepsShown  = 8    // step groups the text shows per node
	maxCgroupReasonBytes = 300  // a not-kept reason as kept
)

// cgFamilyOf is each metric's family: what keeps it, as cgroup_not_kept
// names it (helper/cgroup.FamilyNames).
var cgFamilyOf = map[string]string{
	mCgCPU: vocab.CgroupFamilyCPUUsage, mCgPeriods: vocab.CgroupFamilyCPUThrottling, mCgThrottledPeriods: vocab.CgroupFamilyCPUThrottling, mCgThrottledSeconds: vocab.CgroupFamilyCPUThrottling,
	mCgMemCurrent: vocab.CgroupFamilyMemoryCurrent, mCgMemPeak: vocab.CgroupFamilyMemoryPeak, mCgOOMKills: vocab.CgroupFamilyOOMKills,
	mCgCPUPressureSome: vocab.CgroupFamilyCPUPressure, mCgCPUPressureFull: vocab.CgroupFamilyCPUPressure,
	mCgMemPressureSome: vocab.CgroupFamilyMemoryPressure, mCgMemPressureFull: vocab.CgroupFamilyMemoryPressure,
	mCgIOPressureSome: vocab.CgroupFamilyIOPressure, mCgIOPressureFull: vocab.CgroupFamilyIOPressure,
	mCgMemLimit: vocab.CgroupFamilyMemoryLimit,
}

// CgroupUsage is what one of the job's cgroups on one node cost over the
// run, from the cgroup readings. Totals are the kernel's (since the
// group was made) at the last scrape; a figure the node does not keep is
// null, and NotKept says why.
type CgroupUsage struct {
	Node string `json:"node"`
	Link string `json:"link,omitempty"`
	// Group is "job" (Slurm's job group), "step" (a step's group: Step is
	// its id; "" for the step groups the supervisor did not read) or
	// "collector" (the collector's own group: the telemetry's cost).
	Group string `json:"group"`
	Step  string `json:"step,omitempty"`
	// First and Last are the first and last scrape that held a figure of
	// the group (zero when none did); Scrapes counts them.
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
	Scrapes int       `json:"scrapes"`
	// CPUSeconds is the CPU time used, seconds; CPUThrottledSeconds the
	// time throttled, of CPUThrottledPeriods in CPUPeriods CFS periods.
	CPUSeconds          Value `json:"cpu_seconds"`
	CPUThrottledSeconds Value `json:"cpu_throttled_seconds"`
	CPUPeriods          Value `json:"cpu_periods"`
	CPUThrottledPeriods Value `json:"cpu_throttled_periods"`
	// MemoryPeakBytes is the kernel's peak (v1 memory.max_usage_in_bytes,
	// v2 memory.peak), MemoryCurrentMaxBytes the highest memory.current
	// scraped (a lower bound of the peak), MemoryLimitBytes the bound
	// (null: unbounded or not kept).
	MemoryPeakBytes       Value `json:"memory_peak_bytes"`
	MemoryCurrentMaxBytes Value `json:"memory_current_max_bytes"`
	MemoryLimitBytes      Value `json:"memory_limit_bytes"`
	OOMKills              Value `json:"oom_kills"`
	// CPUPressure, MemoryPressure and IOPressure are the group's PSI.
	CPUPressure    Pressure `json:"cpu_pressure"`
	MemoryPressure Pressure `json:"memory_pressure"`
	IOPressure     Pressure `json:"io_pressure"`
	// NotKept maps a family the node does not keep for the group
	// (cpu_usage, cpu_throttling, memory_current, memory_peak, oom_kills,
	// cpu_pressure, memory_pressure, io_pressure; "all": the whole group)
	// to why, as cgroup_not_kept says; a family with any figure is not
	// listed.
	NotKept map[string]string `json:"not_kept"`
}

// Pressure is one resource's PSI of a group.
type Pressure struct {
	// SomeSeconds and FullSeconds are the time some (all) of the group's
	// tasks stalled on the resource, seconds, at the last scrape.
	SomeSeconds Value `json:"some_seconds"`
	FullSeconds Value `json:"full_seconds"`
	// SomeShare and FullShare are their increase over the scraped window
	// (WindowSeconds) divided by it: the share of that time stalled, 0..1
	// (the average PSI over the window); null with one scrape.
	SomeShare     Value `json:"some_share"`
	FullShare     Value `json:"full_share"`
	WindowSeconds Value `json:"window_seconds"`
}

// cgKey names one group on one node.
type cgKey struct{ link, node, group, step string }

// cgValue is one metric of one group over the run.
type cgValue struct {
	n               int
	first, last     float64
	max             float64
	firstMs, lastMs int64
}

func (v *cgValue) add(ms int64, x float64) {
	if v.n > 0 && ms < v.lastMs {
		return
	}
	if v.n == 0 {
		v.first, v.firstMs, v.max = x, ms, x
	}
	v.n++
	v.last, v.lastMs = x, ms
	v.max = math.Max(v.max, x)
}

// cgGroup collects one group.
type cgGroup struct {
	key      cgKey
	vals     map[string]*cgValue
	notKept  map[string]string
	scrapes  map[int64]bool
	firstMs  int64
	lastMs   int64
	seenRank int
}

// cgroupPoint keeps one point of the cgroup readings (bounded in groups).
func (a *aggregator) cgroupPoint(name, node string, p numberPoint) {
	if _, ok := cgFamilyOf[name]; !ok && name != mCgNotKept {
		return
	}
	v, ok := p.value()
	if !ok {
		return
	}
	k := cgKey{a.cur.src.Link, node, p.Attributes.get(vocab.LabelCgroup), p.Attributes.get(vocab.LabelStep)}
	if k.group == "" {
		return
	}
	g := a.cgGroups[k]
	if g == nil {
		if len(a.cgGroups) >= maxCgroupGroups {
			a.cgDropped++
			return
		}
		g = &cgGroup{key: k, vals: map[string]*cgValue{}, notKept: map[string]string{}, scrapes: map[int64]bool{}, seenRank: len(a.cgGroups)}
		a.cgGroups[k] = g
	}
	ms := p.Time.ms()
	if name == mCgNotKept {
		if v == 1 {
			why := p.Attributes.get(vocab.LabelReason)
			if len(why) > maxCgroupReasonBytes {
				why = why[:maxCgroupReasonBytes] + "..."
			}
			g.notKept[orNone(p.Attributes.get(vocab.LabelFamily))] = why
		}
		return
	}
	x := g.vals[name]
	if x == nil {
		x = &cgValue{}
		g.vals[name] = x
	}
	x.add(ms, v)
	if len(g.scrapes) < 1<<16 {
		g.scrapes[ms] = true
	}
	if g.firstMs == 0 || ms < g.firstMs {
		g.firstMs = ms
	}
	g.lastMs = max(g.lastMs, ms)
}

// groupRank orders a node's groups: the job's, its steps, the collector's.
func groupRank(g string) int {
	switch g {
	case vocab.CgroupJob:
		return 0
	case vocab.CgroupStep:
		return 1
	case vocab.CgroupCollector:
		return 2
	}
	return 3
}

// stepLess orders step ids: batch, extern, interactive, then by number.
func stepLess(a, b string) bool {
	rank := func(s string) (int, int) {
		switch s {
		case "batch":
			return 0, 0
		case "extern":
			return 1, 0
		case "interactive":
			return 2, 0
		case "":
			return 5, 0
		}
		n, err := strconv.Atoi(strings.SplitN(s, "+", 2)[0])
		if err != nil {
			return 4, 0
		}
		return 3, n
	}
	ra, na := rank(a)
	rb, nb := rank(b)
	if ra != rb {
		return ra < rb
	}
	if na != nb {
		return na < nb
	}
	return a < b
}

// cgroups returns the groups' usage, by node (in the dirs' order), then
// group and step.
func (a *aggregator) cgroups() []CgroupUsage {
	nodeRank := map[string]int{}
	for _, d := range a.dirs {
		k := d.src.Link + "\x00" + d.node
		if _, ok := nodeRank[k]; !ok {
			nodeRank[k] = len(nodeRank)
		}
	}
	gs := make([]*cgGroup, 0, len(a.cgGroups))
	for _, g := range a.cgGroups {
		gs = append(gs, g)
	}
	sort.Slice(gs, func(i, j int) bool {
		x, y := gs[i].key, gs[j].key
		nx, okx := nodeRank[x.link+"\x00"+x.node]
		ny, oky := nodeRank[y.link+"\x00"+y.node]
		if !okx {
			nx = len(nodeRank) + gs[i].seenRank
		}
		if !oky {
			ny = len(nodeRank) + gs[j].seenRank
		}
		if nx != ny {
			return nx < ny
		}
		if x.node != y.node {
			return x.node < y.node
		}
		if groupRank(x.group) != groupRank(y.group) {
			return groupRank(x.group) < groupRank(y.group)
		}
		return stepLess(x.step, y.step)
	})
	out := []CgroupUsage{}
	nan := Value(math.NaN())
	for _, g := range gs {
		u := CgroupUsage{Node: g.key.node, Link: g.key.link, Group: g.key.group, Step: g.key.step, Scrapes: len(g.scrapes),
			First: unixMs(g.firstMs), Last: unixMs(g.lastMs), NotKept: map[string]string{}}
		last := func(m string) Value {
			if x := g.vals[m]; x != nil {
				return Value(x.max) // a kernel counter or peak: its highest value is its last
			}
			return nan
		}
		u.CPUSeconds, u.CPUThrottledSeconds = last(mCgCPU), last(mCgThrottledSeconds)
		u.CPUPeriods, u.CPUThrottledPeriods = last(mCgPeriods), last(mCgThrottledPeriods)
		u.MemoryPeakBytes, u.MemoryCurrentMaxBytes, u.OOMKills = last(mCgMemPeak), last(mCgMemCurrent), last(mCgOOMKills)
		u.MemoryLimitBytes = nan
		if x := g.vals[mCgMemLimit]; x != nil {
			u.MemoryLimitBytes = Value(x.last)
		}
		psi := func(some, full string) Pressure {
			p := Pressure{SomeSeconds: last(some), FullSeconds: last(full), SomeShare: nan, FullShare: nan, WindowSeconds: nan}
			share := func(x *cgValue) Value {
				if x == nil || x.n < 2 || x.lastMs <= x.firstMs || x.last < x.first {
					return nan
				}
				return Value((x.last - x.first) / (float64(x.lastMs-x.firstMs) / 1000))
			}
			if x := g.vals[some]; x != nil && x.n >= 2 && x.lastMs > x.firstMs {
				p.WindowSeconds = Value(float64(x.lastMs-x.firstMs) / 1000)
			}
			p.SomeShare, p.FullShare = share(g.vals[some]), share(g.vals[full])
			return p
		}
		u.CPUPressure = psi(mCgCPUPressureSome, mCgCPUPressureFull)
		u.MemoryPressure = psi(mCgMemPressureSome, mCgMemPressureFull)
		u.IOPressure = psi(mCgIOPressureSome, mCgIOPressureFull)
		// A family is not kept only where no figure of it came: a group
		// not there at the first scrapes (the job's before its first
		// step) may be read later.
		have := map[string]bool{}
		for m := range g.vals {
			have[cgFamilyOf[m]] = true
		}
		for fam, why := range g.notKept {
			if fam == cgFamilyAll && len(g.vals) > 0 {
				continue
			}
			if !have[fam] {
				u.NotKept[fam] = why
			}
		}
		out = append(out, u)
	}
	return out
}
