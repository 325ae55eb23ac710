package inspect

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// maxPhasesShown bounds the phases the text shows per node (--json lists
// every one kept).
const maxPhasesShown = 24

// phaseOrigin is the earliest phase start of the report (the submit where
// the queue wait is known): the timeline's zero.
func (r *Report) phaseOrigin() time.Time {
	var o time.Time
	for _, np := range r.Phases {
		for _, p := range np.Phases {
			if !p.SpanStart.IsZero() && (o.IsZero() || p.SpanStart.Before(o)) {
				o = p.SpanStart
			}
		}
	}
	return o
}

// offset is t as seconds since the origin ("+12.345", "+1234.5").
func offset(t, origin time.Time) string {
	s := t.Sub(origin).Seconds()
	if math.Abs(s) < 100 {
		return fmt.Sprintf("%+.3f", s)
	}
	return fmt.Sprintf("%+.1f", s)
}

// phaseNote is what the text says after a phase's times.
func phaseNote(p Phase, origin time.Time) string {
	var n []string
	if p.Start == nil {
		n = append(n, "start not handed on (span from "+offset(p.SpanStart, origin)+")")
	}
	switch {
	case p.End == nil && p.Name == phaseEpilog:
		n = append(n, "end not known: the epilog goes on after the supervisor (span ends where it was written, "+offset(p.SpanEnd, origin)+")")
	case p.End == nil && p.Name == phaseDrain:
		n = append(n, "end not known: the collector had exited before the drain (span ends at "+offset(p.SpanEnd, origin)+")")
	case p.End == nil:
		n = append(n, "end not seen (span cut at the drain, "+offset(p.SpanEnd, origin)+")")
	}
	switch {
	case p.Signal != nil:
		n = append(n, fmt.Sprintf("killed by signal %d", *p.Signal))
	case p.ExitCode != nil:
		n = append(n, fmt.Sprintf("exit %d", *p.ExitCode))
	}
	if p.Precision == "1s" {
		n = append(n, "whole seconds")
	}
	switch p.Name {
	case phaseProlog:
		n = append([]string{"to the collector's ready"}, n...)
	case phaseDrain:
		n = append([]string{"to the collector's exit"}, n...)
		if p.Error != "" {
			n = append(n, p.Error)
		}
	}
	if a := p.Aggregated; a != nil {
		n = append(n, fmt.Sprintf("%d steps folded, %d failed, worst exit %d, %.1f s in all", a.Count, a.Failed, a.WorstExitCode, a.TotalSeconds))
	}
	return strings.Join(n, "; ")
}

// phaseLines writes the Slurm phases per node and the time from submit to
// the first rollout, when the files hold phase spans.
func (t *textOut) phaseLines(r *Report) {
	if len(r.Phases) == 0 {
		t.phaseLookalikes(r)
		return
	}
	origin := r.phaseOrigin()
	what := "the first phase's start"
	if s := r.FirstRollout.Submit; s != nil && s.Equal(origin) {
		what = "the submit"
	}
	t.section(fmt.Sprintf("Slurm phases (s since %s, %s UTC)", what, origin.Format("2006-01-02 15:04:05.000")))
	var runs [][]NodePhases // the nodes of each run, in order
	at := map[[2]string]int{}
	for _, np := range r.Phases {
		k := [2]string{np.Link, np.TraceID}
		i, ok := at[k]
		if !ok {
			i = len(runs)
			at[k] = i
			runs = append(runs, nil)
		}
		runs[i] = append(runs[i], np)
	}
	for _, run := range runs {
		if len(run) > maxPhaseNodesShown {
			t.phaseAggregate(run, origin)
		} else {
			t.phaseNodes(run, origin)
		}
	}
	t.phaseLookalikes(r)
	t.firstRolloutLines(r.FirstRollout)
}

// maxPhaseNodesShown is the most nodes of one run whose phases the text
// shows node by node; past it, each phase is aggregated over the nodes
// (phaseAggregate). --json lists every node's phases.
const maxPhaseNodesShown = 4

// phaseAggregate writes one run's phases over its nodes: per phase the
// nodes that have it, the median start, the duration's min, median and
// max with the slowest nodes, or the outliers (over twice the median and
// at least 1 s over it) when there are any and the nodes where it failed or its end was not
// seen.
func (t *textOut) phaseAggregate(run []NodePhases, origin time.Time) {
	var nodes []string
	head := ""
	for _, np := range run {
		nodes = append(nodes, np.Node)
		if np.JobID != "" {
			head = " (job " + np.JobID + ")"
		}
	}
	if np := run[0]; np.Restart != "" && np.Restart != "0" {
		head += " (restart " + np.Restart + ")"
	}
	if np := run[0]; np.Link != "" {
		head += " (chain link " + np.Link + ")"
	}
	t.line("  %d nodes %s%s: each phase over the nodes that have it (--json lists each node's)", len(run), slurm.CompressHostlist(nodes), head)
	t.line("    %-16s %5s %9s %9s %9s %9s  %s", "phase", "nodes", "start p50", "min s", "median s", "max s", "")
	type obs struct {
		node string
		p    Phase
	}
	var order []string
	by := map[string][]obs{}
	for _, np := range run {
		for _, p := range np.Phases {
			l := phaseLabel(p)
			if by[l] == nil {
				order = append(order, l)
			}
			by[l] = append(by[l], obs{np.Node, p})
		}
	}
	// The phases in the order of their median start (slurm.job first,
	// the batch step's parts after it).
	med := func(v []float64) float64 {
		sort.Float64s(v)
		if len(v) == 0 {
			return math.NaN()
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	for _, l := range order {
		os := by[l]
		var starts, durs []float64
		minD, maxD := math.Inf(1), math.Inf(-1)
		var failed, unseen, noStart []string
		for _, o := range os {
			starts = append(starts, o.p.SpanStart.Sub(origin).Seconds())
			if o.p.Start == nil {
				noStart = append(noStart, o.node)
			}
			if o.p.End == nil {
				unseen = append(unseen, o.node)
			}
			if o.p.Signal != nil || (o.p.ExitCode != nil && *o.p.ExitCode != 0) || (o.p.Error != "" && o.p.End != nil) {
				failed = append(failed, o.node)
			}
			if d := o.p.DurationSeconds; d.Known() {
				durs = append(durs, float64(d))
				minD = math.Min(minD, float64(d))
				maxD = math.Max(maxD, float64(d))
			}
		}
		m := med(append([]float64(nil), durs...))
		var notes []string
		var out []string
		for _, o := range os {
			if d := o.p.DurationSeconds; d.Known() && float64(d) > 2*m && float64(d) > m+1 {
				out = append(out, fmt.Sprintf("%s (%.3f s)", o.node, float64(d)))
			}
		}
		if maxD > minD && len(out) == 0 {
			var top []string
			for _, o := range os {
				if d := o.p.DurationSeconds; d.Known() && float64(d) == maxD {
					top = append(top, o.node)
				}
			}
			if len(top) <= 4 {
				notes = append(notes, "max on "+slurm.CompressHostlist(top))
			} else {
				notes = append(notes, fmt.Sprintf("max on %d nodes", len(top)))
			}
		}
		if len(out) > 0 {
			notes = append(notes, "outliers: "+strings.Join(out, ", "))
		}
		if len(failed) > 0 {
			notes = append(notes, "failed on "+slurm.CompressHostlist(failed)+": "+phaseNote(by[l][indexOf(os, failed[0], func(o obs) string { return o.node })].p, origin))
		} else if p := os[0].p; p.ExitCode != nil {
			notes = append(notes, fmt.Sprintf("exit %d", *p.ExitCode))
		}
		if len(unseen) > 0 {
			notes = append(notes, "end not known on "+slurm.CompressHostlist(unseen))
		}
		if len(noStart) > 0 {
			notes = append(notes, "start not handed on on "+slurm.CompressHostlist(noStart))
		}
		if os[0].p.Precision == "1s" {
			notes = append(notes, "whole seconds")
		}
		if len(os) < len(run) {
			var have []string
			for _, o := range os {
				have = append(have, o.node)
			}
			notes = append(notes, "on "+slurm.CompressHostlist(have))
		}
		d3 := func(v float64) string {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return "?"
			}
			return fmt.Sprintf("%.3f", v)
		}
		t.wrap(fmt.Sprintf("    %-16s %5d %9s %9s %9s %9s  ", cut(strings.TrimSpace(l), 16), len(os), offset(origin.Add(time.Duration(med(starts)*float64(time.Second))), origin),
			d3(minD), d3(m), d3(maxD)), strings.Join(notes, "; "))
	}
	for _, np := range run {
		if np.Dropped > 0 {
			t.line("    %s: %d more phase spans not kept (over the bound of %d a node)", np.Node, np.Dropped, maxNodePhases)
		}
		if np.QueueWaitUnknown != "" {
			t.wrap("    queue wait not known: ", np.QueueWaitUnknown)
		}
	}
}

func indexOf[T any](xs []T, want string, key func(T) string) int {
	for i, x := range xs {
		if key(x) == want {
			return i
		}
	}
	return 0
}

// phaseNodes writes one run's phases node by node.
func (t *textOut) phaseNodes(run []NodePhases, origin time.Time) {
	t.line("    %-18s %9s %9s %10s  %s", "phase", "start", "end", "duration", "")
	for _, np := range run {
		head := np.Node
		if np.JobID != "" {
			head += " (job " + np.JobID + ")"
		}
		if np.Restart != "" && np.Restart != "0" {
			head += " (restart " + np.Restart + ")"
		}
		if np.Link != "" {
			head += " (chain link " + np.Link + ")"
		}
		t.line("  %s", head)
		for i, p := range np.Phases {
			if i == maxPhasesShown {
				t.line("    ... %d more phases (--json lists them)", len(np.Phases)-maxPhasesShown)
				break
			}
			start, end, d := offset(p.SpanStart, origin), offset(p.SpanEnd, origin), f(p.DurationSeconds, 3)+" s"
			if p.Start == nil {
				start = "?"
			}
			if p.End == nil {
				end = "?"
			}
			if !p.DurationSeconds.Known() {
				d = "?"
			}
			t.wrap(fmt.Sprintf("    %-18s %9s %9s %10s  ", cut(phaseLabel(p), 18), start, end, d), phaseNote(p, origin))
		}
		if np.Dropped > 0 {
			t.line("    %d more phase spans not kept (over the bound of %d a node)", np.Dropped, maxNodePhases)
		}
		if np.QueueWaitUnknown != "" {
			t.wrap("    queue wait not known: ", np.QueueWaitUnknown)
		}
	}
}

// phaseLookalikes says how many spans looked like the plugin's Slurm
// phases but were sent by the job (JobLookalikes).
func (t *textOut) phaseLookalikes(r *Report) {
	if n := r.JobLookalikes.PhaseSpans; n > 0 {
		if len(r.Phases) == 0 {
			t.section("Slurm phases")
		}
		t.wrap("  ", fmt.Sprintf("%d spans looked like the plugin's Slurm phases but were sent by the job and are not counted as Slurm's (they lack %s=%s, which only the plugin's own receiver stamps); they are among the job's spans",
			n, contract.SourceKey, contract.SourceSlurm))
	}
}

// firstRolloutLines writes where the time went between the submit and the
// first rollout.
func (t *textOut) firstRolloutLines(fr FirstRollout) {
	head := "submit to first rollout"
	if fr.Node != "" {
		head += " (batch node " + fr.Node
		if fr.RolloutNode != "" && fr.RolloutNode != fr.Node {
			head += ", first rollout on " + fr.RolloutNode
		}
		head += ")"
	}
	t.section(head)
	for _, p := range fr.Parts {
		note := ""
		if p.Precision == "1s" && p.Seconds.Known() {
			note = "  (slurmctld's whole seconds)"
		}
		name := p.Name
		if p.Within != "" {
			name = "  " + name
		}
		t.line("  %-34s %10s%s", name, secs3(p.Seconds), note)
	}
	total := "-"
	if fr.TotalSeconds.Known() {
		total = secs3(fr.TotalSeconds)
		if fr.TotalFrom != "submit" {
			total += " (from the " + fr.TotalFrom + ": the earlier times are not known)"
		}
	}
	t.line("  %-34s %10s", "submit to first rollout", total)
	for _, w := range fr.Why {
		t.wrap("  - ", w)
	}
}

func secs3(v Value) string {
	if !v.Known() {
		return "-"
	}
	return fmt.Sprintf("%.3f s", float64(v))
}

// cgroupLines writes the job's cgroups per node: a row of usage per
// group, its pressure where kept, then what is not kept and why, each
// reason once with the groups it holds for.
func (t *textOut) cgroupLines(r *Report) {
	lookalikes := func() {
		if n := r.JobLookalikes.CgroupPoints; n > 0 {
			t.wrap("  ", fmt.Sprintf("%d metric points looked like the plugin's cgroup series but were sent by the job and are not counted as the job's cgroups (they lack %s=%s, which the node's collector stamps only on the supervisor's own readings)",
				n, contract.SourceKey, contract.SourceSlurm))
		}
	}
	if len(r.Cgroups) == 0 {
		if r.JobLookalikes.CgroupPoints > 0 {
			t.section("cgroups")
			lookalikes()
		}
		return
	}
	defer lookalikes()
	t.section("cgroups (producer cgroup; the kernel's totals since each group was made)")
	// Past maxTableRows groups: each kind of group's figures aggregated over
	// the nodes, the outliers' rows, and the reasons for what is not kept
	// with the node's name folded ("<node>").
	tb := r.htmlTables()["cgroups"]
	show := map[int]bool{}
	if tb.Aggregated {
		t.aggLines(tb, "groups")
		for _, i := range tb.OutlierRows {
			show[i] = true
		}
	}
	if !tb.Aggregated || len(show) > 0 {
		t.line("  %-22s %8s %11s %11s %11s %9s", "node group", "CPU s", "throttled s", "memory peak", "bound", "OOM kills")
	}
	steps := map[string]int{}
	var whys []string
	where := map[string][]string{}     // reason -> the family lists it holds for, in order
	groups := map[[2]string][]string{} // (reason, families) -> groups
	for ui, u := range r.Cgroups {
		name := u.Node + " " + u.Group
		if u.Link != "" {
			name = u.Node + " (link " + u.Link + ") " + u.Group
		}
		if u.Group == "step" {
			if u.Step == "" {
				name += "s (more)"
			} else {
				name += " " + u.Step
			}
		}
		var fams []string
		for fam := range u.NotKept {
			fams = append(fams, fam)
		}
		sort.Strings(fams)
		byWhy := map[string][]string{}
		var order []string
		for _, fam := range fams {
			why := u.NotKept[fam]
			if byWhy[why] == nil {
				order = append(order, why)
			}
			byWhy[why] = append(byWhy[why], fam)
		}
		for _, why := range order {
			fams := byWhy[why]
			if tb.Aggregated {
				why = nodeless(why, u.Node)
			}
			if where[why] == nil {
				whys = append(whys, why)
			}
			k := [2]string{why, strings.Join(fams, ", ")}
			if groups[k] == nil {
				where[why] = append(where[why], k[1])
			}
			groups[k] = append(groups[k], name)
		}
		if u.Group == "step" {
			k := u.Link + "\x00" + u.Node
			steps[k]++
			if steps[k] > maxCgroupStepsShown {
				if steps[k] == maxCgroupStepsShown+1 {
					n := 0
					for _, x := range r.Cgroups {
						if x.Group == "step" && x.Node == u.Node && x.Link == u.Link {
							n++
						}
					}
					t.line("  %s: %d more step groups (--json lists them)", u.Node, n-maxCgroupStepsShown)
				}
				continue
			}
		}
		if !tb.Aggregated || show[ui] {
			t.cgroupRow(cut(name, 22), u)
		}
	}
	if len(whys) > 0 {
		t.line("  not kept here, and why:")
	}
	for _, why := range whys {
		var of []string
		for _, fams := range where[why] {
			names := groups[[2]string{why, fams}]
			if tb.Aggregated {
				names = foldNames(names)
			}
			of = append(of, fams+" of "+strings.Join(names, ", "))
		}
		t.wrap("    ", strings.Join(of, "; ")+":")
		t.wrap("      ", why)
	}
}

// foldNames folds "<node> <group>" names by their group, the nodes as a
// hostlist ("gn[1-64] job"), groups in their first name's order.
func foldNames(names []string) []string {
	var order []string
	nodes := map[string][]string{}
	for _, n := range names {
		node, rest, _ := strings.Cut(n, " ")
		if nodes[rest] == nil {
			order = append(order, rest)
		}
		nodes[rest] = append(nodes[rest], node)
	}
	out := make([]string, 0, len(order))
	for _, rest := range order {
		out = append(out, strings.TrimSpace(slurm.CompressHostlist(nodes[rest])+" "+rest))
	}
	return out
}

// notKeptOr is v in its unit, or "not kept" where the node does not keep
// the family, or "-" (not sent).
func notKeptOr(u CgroupUsage, fam string, v Value, show func(Value) string) string {
	if v.Known() {
		return show(v)
	}
	if _, ok := u.NotKept[fam]; ok {
		return "not kept"
	}
	if _, ok := u.NotKept[cgFamilyAll]; ok {
		return "not kept"
	}
	return "-"
}

// cgroupRow writes one group's row and its pressure line.
func (t *textOut) cgroupRow(name string, u CgroupUsage) {
	s2 := func(v Value) string { return f(v, 2) }
	n0 := func(v Value) string { return f(v, 0) }
	if _, ok := u.NotKept[cgFamilyAll]; ok && u.Scrapes == 0 {
		t.line("  %-22s %8s", name, "not kept")
		return
	}
	peak := notKeptOr(u, "memory_peak", u.MemoryPeakBytes, bytesH)
	if !u.MemoryPeakBytes.Known() && u.MemoryCurrentMaxBytes.Known() {
		peak = ">=" + bytesH(u.MemoryCurrentMaxBytes) // the highest scraped current
	}
	// No bound series where the group's memory is read: unbounded.
	bound := "-"
	switch {
	case u.MemoryLimitBytes.Known():
		bound = bytesH(u.MemoryLimitBytes)
	case u.MemoryCurrentMaxBytes.Known() || u.MemoryPeakBytes.Known():
		bound = "none"
	}
	t.line("  %-22s %8s %11s %11s %11s %9s", name, notKeptOr(u, "cpu_usage", u.CPUSeconds, s2),
		notKeptOr(u, "cpu_throttling", u.CPUThrottledSeconds, s2), peak, bound, notKeptOr(u, "oom_kills", u.OOMKills, n0))
	var psi []string
	for _, x := range []struct {
		res string
		p   Pressure
	}{{"cpu", u.CPUPressure}, {"memory", u.MemoryPressure}, {"io", u.IOPressure}} {
		if !x.p.SomeSeconds.Known() {
			continue
		}
		s := fmt.Sprintf("%s %s/%s s", x.res, f(x.p.SomeSeconds, 2), f(x.p.FullSeconds, 2))
		if x.p.SomeShare.Known() {
			s += fmt.Sprintf(" (%s/%s)", pct(x.p.SomeShare), pct(x.p.FullShare))
		}
		psi = append(psi, s)
	}
	if len(psi) > 0 {
		t.wrap("    pressure some/full (share of the time read): ", strings.Join(psi, ", "))
	}
}
