package inspect

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// Host energy per node and per Slurm step, from the node's RAPL counters.
//
// Where the site opts in (plugstack host_power=rapl) the supervisor reads
// the node's RAPL zones through descriptors root opened and serves their
// energy since its first read, per zone, as vocab.HostEnergyJoules (J;
// helper/supervise's hostenergy.go), which the collector scrapes into the
// files at the scrape interval, with the time its sums began
// (vocab.HostEnergyStart: each zone's sum is 0 then, which brackets a
// window from the job's start). A window's figure is the increase between
// the samples bracketing it (the last at or before its start, the first at
// or after its end), summed over the package zones (package-N, the CPU
// sockets) and their dram subzones: the kernel's core and uncore subzones
// are parts of their package, and psys (the platform) covers the packages,
// so neither is added (Documentation/power/powercap/powercap.rst, Linux
// v6.12). The figure is the node's: other jobs on the node and the
// system's own work are in it. It is the job's only where the job had the
// node alone (an exclusive allocation): inspect cannot tell from the files
// whether it did, and does not split it by a CPU share.
//
// Where a node has no RAPL energy but its supervisor served hwmon power
// (plugstack host_power=hwmon, or auto on a node without RAPL: the ACPI
// power meter's powerM_average, else powerM_input, as
// vocab.HostPowerWatts in W, read at each scrape; helper/supervise's
// hwmon.go), the node's figure is that power integrated over the window
// (trapezoids between consecutive distinct samples, from the last sample
// at or before its start to the first at or after its end, summed over
// the meter's sensors), as the GPUs' power is: a gap between distinct
// samples above 3 s fails it (ReasonGap), and it has no error bound. The
// meter measures the whole node (GPUs included), and the figure is the
// node's as RAPL's is.

// mHostEnergy is the host energy counter as the files name it;
// mHostStart the time its sum began (s since the epoch); mHostPower the
// node's hwmon power gauge (W).
const (
	mHostEnergy = vocab.HostEnergyJoules
	mHostStart  = vocab.HostEnergyStart
	mHostPower  = vocab.HostPowerWatts
)

func init() {
	tracked[mHostEnergy] = true
	tracked[mHostStart] = true
	tracked[mHostPower] = true
}

// The sources of a host figure (HostEnergy.Source).
const (
	// HostSourceRAPL: the RAPL zones' energy counters' increase.
	HostSourceRAPL = "from RAPL energy counters"
	// HostSourceHwmon: the hwmon power meter's power integrated.
	HostSourceHwmon = "from hwmon power"
)

// HostAttributionMeter is HostEnergy.Attribution for a figure from hwmon
// power: the node's.
const HostAttributionMeter = "the node's: the whole node's power meter (ACPI power_meter, GPUs and fans included), other jobs' and the system's work included; " +
	"the job's only where it had the node alone (an exclusive allocation, which the files do not say); not split by a CPU share"

// Reasons a host figure is not trusted (besides the GPU figures'
// ReasonWindowUnknown, ReasonNotBracketed, ReasonNotMonotonic and
// ReasonReset).
const (
	// ReasonNoHostPower: the node's files have no host energy.
	ReasonNoHostPower = "no host power on the node"
	// ReasonZonesDiffer: the zones sampled at the window's ends differ.
	ReasonZonesDiffer = "host energy zones not matched between the window's ends"
)

// HostAttributionNode is HostEnergy.Attribution: the figure is the node's.
const HostAttributionNode = "the node's: the whole node's RAPL packages and DRAM, other jobs' and the system's work included; " +
	"the job's only where it had the node alone (an exclusive allocation, which the files do not say); not split by a CPU share"

// noHostPowerWhy says why a node has no host energy.
const noHostPowerWhy = "its supervisor sent no " + mHostEnergy + " or " + mHostPower + " (plugstack host_power is off there, the node has no RAPL zone " +
	"or hwmon power meter, or root could not open one: slurmd's and the supervisor's logs say which)"

// HostEnergy is the host energy of one node over one window: a Slurm
// step's, or (Step "") the node's whole sampled run.
type HostEnergy struct {
	Node    string `json:"node"`
	Link    string `json:"link,omitempty"`
	Restart string `json:"restart_count,omitempty"`
	// Step is the step's id ("batch", "0", ...), "" for the node's whole
	// run (from its first host sample to its last).
	Step  string     `json:"step"`
	Start *time.Time `json:"start"`
	End   *time.Time `json:"end"`
	// Joules is the summed zones' increase between the samples
	// bracketing the window (J); ErrorJoules bounds it as for the GPUs'
	// counter (the window's own lies between Joules - ErrorJoules and
	// Joules); BracketSeconds is the most time the bracketing samples add
	// to the window (s). Null where the node has no host energy or the
	// window is not bracketed.
	Joules         Value `json:"joules"`
	ErrorJoules    Value `json:"error_joules"`
	BracketSeconds Value `json:"bracket_seconds"`
	// Watts is Joules over the bracketing samples' span (W).
	Watts Value `json:"watts"`
	// Source is HostSourceRAPL or HostSourceHwmon ("" where the node has
	// no host power).
	Source string `json:"source"`
	// MaxGapSeconds is, for a figure from hwmon power, the longest time
	// between consecutive distinct samples of a sensor in the window (s;
	// above 3 s the figure is not trusted); null for RAPL's counters.
	MaxGapSeconds Value `json:"max_gap_seconds"`
	// Zones are the zones summed (package-0, package-0/dram, ...), or the
	// hwmon sensors integrated (chip/hwmon/sensor: power_meter/hwmon3/
	// power1); NotSummed the node's other zones (core, uncore, psys:
	// parts of a package, or the platform over them).
	Zones     []string `json:"zones"`
	NotSummed []string `json:"zones_not_summed,omitempty"`
	// Attribution is HostAttributionNode (RAPL) or HostAttributionMeter
	// (hwmon): whose energy the figure is.
	Attribution string  `json:"attribution"`
	Verdict     Verdict `json:"verdict"`
}

// summedZone reports whether a zone is added to the host figure: a
// package (package-N, package-N-die-M) or its dram subzone.
func summedZone(z string) bool {
	parent, sub, ok := strings.Cut(z, "/")
	if !ok {
		return strings.HasPrefix(z, "package-")
	}
	return strings.HasPrefix(parent, "package-") && sub == "dram"
}

// hostZones lists each node's host energy series by zone. Each series
// starts with the sample the supervisor's start gives (mHostStart: the
// sum was 0 when it began, before the collector's first scrape), so that
// a window from the job's start (the batch step's) is bracketed.
func (a *aggregator) hostZones() map[string]map[string]*sampled {
	type nz struct{ node, zone string }
	begin := map[nz]int64{}
	for _, s := range a.byMetric(mHostStart) {
		if s.g != nil && s.g.n > 0 && s.g.min > 0 {
			begin[nz{s.key.node, s.labels["zone"]}] = int64(s.g.min * 1000)
		}
	}
	out := map[string]map[string]*sampled{}
	for _, s := range a.byMetric(mHostEnergy) {
		z := s.labels["zone"]
		sm := a.samples[s]
		if z == "" || sm == nil || len(sm.pts) == 0 {
			continue
		}
		x := *sm
		if ms, ok := begin[nz{s.key.node, z}]; ok && ms < sm.pts[0].ms {
			x.pts = append([]sample{{ms: ms, v: 0}}, sm.pts...)
		}
		if out[s.key.node] == nil {
			out[s.key.node] = map[string]*sampled{}
		}
		out[s.key.node][z] = &x
	}
	return out
}

// hostOver is node's host energy over [t0, t1] (unix ms) from its zones.
func hostOver(node string, zones map[string]*sampled, t0, t1 int64) HostEnergy {
	nan := Value(math.NaN())
	h := HostEnergy{Node: node, Joules: nan, ErrorJoules: nan, BracketSeconds: nan, Watts: nan, MaxGapSeconds: nan, Zones: []string{}, Attribution: HostAttributionNode}
	var names []string
	for z := range zones {
		names = append(names, z)
	}
	sort.Strings(names)
	for _, z := range names {
		if summedZone(z) {
			h.Zones = append(h.Zones, z)
		} else {
			h.NotSummed = append(h.NotSummed, z)
		}
	}
	if len(h.Zones) == 0 {
		why := noHostPowerWhy
		if len(h.NotSummed) > 0 {
			why = "no package zone among " + strings.Join(h.NotSummed, ", ")
		}
		h.Verdict.add(ReasonNoHostPower, node+": "+why)
		h.Verdict.done()
		return h
	}
	joules, errJ, bracketMs := 0.0, 0.0, int64(0)
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	var missStart, missEnd, unordered, resets []string
	for _, z := range h.Zones {
		pts := zones[z].pts
		b0, b1, mono := bracket(pts, t0, t1)
		if !mono {
			unordered = append(unordered, z)
		}
		if b0 < 0 {
			missStart = append(missStart, z)
		}
		if b1 < 0 {
			missEnd = append(missEnd, z)
		}
		if b0 < 0 || b1 < 0 {
			continue
		}
		inc, bound, reset := bracketedIncrease(pts, b0, b1, t0, t1)
		if reset {
			resets = append(resets, z)
		}
		joules += inc
		errJ += bound
		bracketMs = max(bracketMs, (t0-pts[b0].ms)+(pts[b1].ms-t1))
		lo, hi = min(lo, pts[b0].ms), max(hi, pts[b1].ms)
	}
	h.addBracketing(node, "zones", missStart, missEnd, unordered)
	if len(resets) > 0 {
		h.Verdict.add(ReasonReset, node+" host zones "+strings.Join(resets, ", ")+" (the supervisor's sum started again: the energy before its first new sample is not counted)")
	}
	h.Source = HostSourceRAPL
	if len(missStart)+len(missEnd) == 0 {
		h.Joules, h.ErrorJoules = Value(joules), Value(errJ)
		h.BracketSeconds = Value(float64(bracketMs) / 1000)
		if hi > lo {
			h.Watts = Value(joules / (float64(hi-lo) / 1000))
		}
	}
	h.Verdict.done()
	return h
}

// addBracketing adds the verdicts of a node's window that every series
// (RAPL zones, hwmon sensors: what names them) must bracket: none
// bracketed at one end (ReasonNotBracketed), some not (ReasonZonesDiffer),
// samples out of time order (ReasonNotMonotonic). missStart and missEnd
// name the series without a sample at or before the window's start and
// at or after its end; unordered, those whose samples went back in time.
func (h *HostEnergy) addBracketing(node, what string, missStart, missEnd, unordered []string) {
	switch {
	case len(missStart) == len(h.Zones) || len(missEnd) == len(h.Zones):
		h.Verdict.add(ReasonNotBracketed, describeMissing(node, missStart, missEnd)...)
	case len(missStart)+len(missEnd) > 0:
		h.Verdict.add(ReasonZonesDiffer, describeMissing(node, missStart, missEnd)...)
	}
	if len(unordered) > 0 {
		h.Verdict.add(ReasonNotMonotonic, node+" host "+what+" "+strings.Join(unordered, ", "))
	}
}

// hostEnergy computes each node's host energy over its whole sampled run
// and over each of its steps' windows. Nodes with steps but no host
// energy get one row saying so; nil when no node has either.
func (a *aggregator) hostEnergy(phases []NodePhases) []HostEnergy {
	zones := a.hostZones()
	sensors := a.hostSensors()
	windows := stepWindows(phases)
	if len(zones) == 0 && len(sensors) == 0 {
		return []HostEnergy{}
	}
	var nodes []string
	seen := map[string]bool{}
	for n := range zones {
		nodes, seen[n] = append(nodes, n), true
	}
	for n := range sensors {
		if !seen[n] {
			nodes, seen[n] = append(nodes, n), true
		}
	}
	for _, w := range windows {
		if !seen[w.node] {
			nodes, seen[w.node] = append(nodes, w.node), true
		}
	}
	sort.SliceStable(nodes, func(i, j int) bool { return slurm.NaturalLess(nodes[i], nodes[j]) })
	out := []HostEnergy{}
	for _, n := range nodes {
		zs := zones[n]
		over, attribution := hostOver, HostAttributionNode
		if len(zs) == 0 && len(sensors[n]) > 0 {
			// No RAPL energy on the node: its hwmon power integrated.
			zs, over, attribution = sensors[n], hwmonOver, HostAttributionMeter
		}
		// The node's whole run: its first host sample to its last.
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for _, sm := range zs {
			lo, hi = min(lo, sm.pts[0].ms), max(hi, sm.pts[len(sm.pts)-1].ms)
		}
		run := over(n, zs, lo, hi)
		if len(zs) > 0 {
			t0, t1 := time.UnixMilli(lo).UTC(), time.UnixMilli(hi).UTC()
			run.Start, run.End = &t0, &t1
		}
		out = append(out, run)
		if len(zs) == 0 {
			continue // one row: no host power on the node
		}
		for _, w := range windows {
			if w.node != n {
				continue
			}
			var h HostEnergy
			if w.start == nil || w.end == nil {
				nan := Value(math.NaN())
				h = HostEnergy{Node: n, Joules: nan, ErrorJoules: nan, BracketSeconds: nan, Watts: nan, MaxGapSeconds: nan, Zones: []string{}, Attribution: attribution}
				h.Verdict.add(ReasonWindowUnknown, fmt.Sprintf("%s step %s: its start or end was not seen", n, w.step))
				h.Verdict.done()
			} else {
				h = over(n, zs, msOf(w.start), msOf(w.end))
			}
			h.Link, h.Restart, h.Step, h.Start, h.End = w.link, w.restart, w.step, w.start, w.end
			out = append(out, h)
		}
	}
	return out
}

// hostSensors lists each node's hwmon power series by sensor
// (chip/hwmon/sensor).
func (a *aggregator) hostSensors() map[string]map[string]*sampled {
	out := map[string]map[string]*sampled{}
	for _, s := range a.byMetric(mHostPower) {
		sm := a.samples[s]
		if s.labels["sensor"] == "" || sm == nil || len(sm.pts) == 0 {
			continue
		}
		k := s.labels["chip"] + "/" + s.labels["hwmon"] + "/" + s.labels["sensor"]
		if out[s.key.node] == nil {
			out[s.key.node] = map[string]*sampled{}
		}
		out[s.key.node][k] = sm
	}
	return out
}

// hwmonOver is node's host energy over [t0, t1] (unix ms) from its hwmon
// power sensors: each sensor's power integrated between the samples
// bracketing the window (powerIntegral), summed; the longest gap between
// distinct samples above 3 s fails it (ReasonGap).
func hwmonOver(node string, sensors map[string]*sampled, t0, t1 int64) HostEnergy {
	nan := Value(math.NaN())
	h := HostEnergy{Node: node, Joules: nan, ErrorJoules: nan, BracketSeconds: nan, Watts: nan, MaxGapSeconds: nan, Zones: []string{},
		Source: HostSourceHwmon, Attribution: HostAttributionMeter}
	for k := range sensors {
		h.Zones = append(h.Zones, k)
	}
	sort.Strings(h.Zones)
	joules, bracketMs, gapMs := 0.0, int64(0), int64(0)
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	var missStart, missEnd, unordered, gaps []string
	for _, k := range h.Zones {
		sm := sensors[k]
		pts := sm.pts
		b0, b1, mono := bracket(pts, t0, t1)
		if !mono {
			unordered = append(unordered, k)
		}
		if b0 < 0 {
			missStart = append(missStart, k)
		}
		if b1 < 0 {
			missEnd = append(missEnd, k)
		}
		if b0 < 0 || b1 < 0 {
			continue
		}
		j, gap := powerIntegral(pts, b0, b1)
		joules += j
		gapMs = max(gapMs, gap)
		if gap > maxGapMs {
			d := fmt.Sprintf("%s %.1f s", k, float64(gap)/1000)
			if sm.stride > 1 {
				d += fmt.Sprintf(" (a long series: inspect kept every %dth of its %d samples)", sm.stride, maxSamples*sm.stride)
			}
			gaps = append(gaps, d)
		}
		bracketMs = max(bracketMs, (t0-pts[b0].ms)+(pts[b1].ms-t1))
		lo, hi = min(lo, pts[b0].ms), max(hi, pts[b1].ms)
	}
	h.addBracketing(node, "sensors", missStart, missEnd, unordered)
	if len(gaps) > 0 {
		h.Verdict.add(ReasonGap, node+" host "+strings.Join(gaps, ", ")+": integrating hwmon power needs a sample every 3 s or less (otel.scrape_interval_seconds: 3 or less)")
	}
	if len(missStart)+len(missEnd) == 0 {
		h.Joules = Value(joules)
		h.BracketSeconds = Value(float64(bracketMs) / 1000)
		h.MaxGapSeconds = Value(float64(gapMs) / 1000)
		if hi > lo {
			h.Watts = Value(joules / (float64(hi-lo) / 1000))
		}
	}
	h.Verdict.done()
	return h
}

// hostFoldNodes is the most nodes whose host rows the text lists one by
// one; past it each window (the run, each step) is one line: the nodes'
// sum where every node has a figure, and the verdicts as hostlists.
const hostFoldNodes = 8

// hostEnergyLines writes the text report's host energy per node and step
// (a job without any: one line, after the GPUs' energy per step).
func (t *textOut) hostEnergyLines(r *Report) {
	if len(r.HostEnergy) == 0 {
		if len(r.StepEnergy) > 0 {
			t.wrap(fmt.Sprintf("  %-24s ", "host power"), "none on any node (plugstack host_power=rapl, hwmon or auto: see the admin guide)")
		}
		return
	}
	t.section("host energy (" + hostSources(r.HostEnergy) + "; the node's)")
	for _, a := range hostAttributions(r.HostEnergy) {
		t.wrap(fmt.Sprintf("  %-24s ", "attributed"), a)
	}
	nodes := map[string]bool{}
	for _, h := range r.HostEnergy {
		nodes[h.Node] = true
	}
	if len(nodes) > hostFoldNodes {
		t.hostFoldedLines(r.HostEnergy)
		return
	}
	for _, h := range r.HostEnergy {
		t.wrap(fmt.Sprintf("  %-24s ", hostRowName(h, true)), hostFigure(h)+"; "+verdictText(h.Verdict, false))
	}
}

// hostSources names the sources of rows: "RAPL", "hwmon" or "RAPL and
// hwmon" (RAPL where none has one).
func hostSources(rows []HostEnergy) string {
	rapl, hw := false, false
	for _, h := range rows {
		rapl = rapl || h.Source == HostSourceRAPL
		hw = hw || h.Source == HostSourceHwmon
	}
	switch {
	case rapl && hw:
		return "RAPL and hwmon"
	case hw:
		return "hwmon"
	}
	return "RAPL"
}

// hostAttributions are the rows' distinct attributions, RAPL's first.
func hostAttributions(rows []HostEnergy) []string {
	var out []string
	for _, a := range []string{HostAttributionNode, HostAttributionMeter} {
		for _, h := range rows {
			if h.Attribution == a {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// hostRowName names a row: "<node> run", "<node> step 0" (withNode
// false: without the node).
func hostRowName(h HostEnergy, withNode bool) string {
	name := "run"
	if h.Step != "" {
		name = strings.TrimPrefix(runName(h.Restart)+" step "+h.Step, " ")
		if h.Link != "" {
			name = "link " + h.Link + " step " + h.Step
		}
	}
	if withNode {
		return h.Node + " " + name
	}
	return name
}

// hostFigure is a row's figure: "1234.5 J (180.2 W), ..., zones" or "-".
func hostFigure(h HostEnergy) string {
	fig := "-"
	if h.Joules.Known() {
		fig = f(h.Joules, 1) + " J"
		if h.Watts.Known() {
			fig += fmt.Sprintf(" (%s W)", f(h.Watts, 1))
		}
		if h.ErrorJoules.Known() && h.BracketSeconds > 0 {
			fig += fmt.Sprintf(", the window's own %s to %s J (samples %s beyond it)", f(h.Joules-h.ErrorJoules, 1), f(h.Joules, 1), dur(h.BracketSeconds))
		}
	}
	if h.Source == HostSourceHwmon {
		fig += ", " + h.Source
		if h.MaxGapSeconds.Known() {
			fig += fmt.Sprintf(" (samples at most %s apart)", dur(h.MaxGapSeconds))
		}
	}
	if len(h.Zones) > 0 {
		fig += ", " + strings.Join(h.Zones, " + ")
	}
	return fig
}

// hostFoldedLines writes one line per window over every node: the sum
// where every node has a figure, then each verdict once with its nodes.
func (t *textOut) hostFoldedLines(rows []HostEnergy) {
	var order []string
	by := map[string][]HostEnergy{}
	for _, h := range rows {
		k := hostRowName(h, false)
		if by[k] == nil {
			order = append(order, k)
		}
		by[k] = append(by[k], h)
	}
	for _, k := range order {
		hs := by[k]
		sum, all := 0.0, true
		var verdicts []string
		nodes := map[string][]string{}
		for _, h := range hs {
			if h.Joules.Known() {
				sum += float64(h.Joules)
			} else {
				all = false
			}
			v := nodeless(verdictText(h.Verdict, false), h.Node)
			if nodes[v] == nil {
				verdicts = append(verdicts, v)
			}
			nodes[v] = append(nodes[v], h.Node)
		}
		fig := "-"
		if all {
			fig = f(Value(sum), 1) + " J over the nodes"
		}
		var vs []string
		for _, v := range verdicts {
			vs = append(vs, fmt.Sprintf("%s on %d %s %s", v, len(nodes[v]), plural(len(nodes[v]), "node"), slurm.CompressHostlist(nodes[v])))
		}
		t.wrap(fmt.Sprintf("  %-24s ", k+" on "+fmt.Sprint(len(hs))+" nodes"), fig+"; "+strings.Join(vs, "; "))
	}
}
