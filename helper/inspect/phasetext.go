package inspect

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/contract"
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
	t.line("    %-18s %9s %9s %10s  %s", "phase", "start", "end", "duration", "")
	for _, np := range r.Phases {
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
	t.phaseLookalikes(r)
	t.firstRolloutLines(r.FirstRollout)
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
		t.line("  %-34s %10s%s", p.Name, secs3(p.Seconds), note)
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
			t.wrap("  ", fmt.Sprintf("%d metric points looked like the plugin's cgroup series but were sent by the job and are not counted as the job's cgroups (they lack %s=%s, which only the plugin's own cgroup scrape stamps)",
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
	t.section("cgroups (scrape job cgroup; the kernel's totals since each group was made)")
	t.line("  %-22s %8s %11s %11s %11s %9s", "node group", "CPU s", "throttled s", "memory peak", "bound", "OOM kills")
	steps := map[string]int{}
	var whys []string
	where := map[string][]string{}     // reason -> the family lists it holds for, in order
	groups := map[[2]string][]string{} // (reason, families) -> groups
	for _, u := range r.Cgroups {
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
			if where[why] == nil {
				whys = append(whys, why)
			}
			k := [2]string{why, strings.Join(byWhy[why], ", ")}
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
		t.cgroupRow(cut(name, 22), u)
	}
	if len(whys) > 0 {
		t.line("  not kept here, and why:")
	}
	for _, why := range whys {
		var of []string
		for _, fams := range where[why] {
			of = append(of, fams+" of "+strings.Join(groups[[2]string{why, fams}], ", "))
		}
		t.wrap("    ", strings.Join(of, "; ")+":")
		t.wrap("      ", why)
	}
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
		t.wrap("    pressure some/full (share of the time scraped): ", strings.Join(psi, ", "))
	}
}
