package inspect

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// maxTableRows is the most rows of a per-node table (model servers, GPUs,
// hosts, cgroups) the page shows row by row; past it the table shows
// each column's min, median and max (with the node of the min and of the
// max) and the outlying rows in full, and every row below it, folded.
const maxTableRows = 8

// aggCol is one column of a per-node table: its head, its text in row i,
// and, for a column of figures, its number in row i (NaN: not known) and
// how an aggregate of it is written.
type aggCol struct {
	Head string
	Left bool
	Text func(i int) string
	Num  func(i int) float64
	Fmt  func(float64) string
}

// aggRow is one row of the page's per-node table: its cells, and a class
// ("agg" for the min, median and max rows, "outlier" for a row shown for
// being far from the median).
type aggRow struct {
	Cells []string
	Class string
}

// aggTable is a per-node table as the page shows it: Rows are the rows
// shown (every row when N <= maxTableRows; else per group of rows the
// min, median and max rows and the outliers), All every row (shown folded
// when Aggregated).
type aggTable struct {
	ID, First  string
	Heads      []aggCol
	Rows, All  []aggRow
	N          int
	Aggregated bool
	Outliers   []string
	// OutlierRows are the outliers' row indexes, Groups the aggregated
	// groups (the text's layout), in order.
	OutlierRows []int
	Groups      []aggGroup
}

// aggGroup is one group of an aggregated table: its label (the count, the
// nodes as a hostlist, the group's name), and per figure column its head
// and min, median and max as written (min and max with their nodes).
type aggGroup struct {
	Name, Hostlist string
	N              int
	Figures        [][4]string
}

// outlying is whether v is far from the figures of its column: more than
// three scaled median absolute deviations from the median and more than
// 20% of the median away from it (a column of near-equal figures has no
// outlier).
func outlying(v, med, mad float64) bool {
	d := math.Abs(v - med)
	return d > 3*1.4826*mad && d > 0.2*math.Abs(med) && d > 1e-9
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// buildAggTable makes the table of n rows: the first column is node(i)
// (and what else names the row), group(i) splits the rows that are
// aggregated apart (cgroups: the job's, a step's, the collector's group;
// GPUs: by index), a row of group "=" (the model servers' sum) is shown as
// it is, after the aggregates.
func buildAggTable(id, first string, n int, name func(i int) string, node func(i int) string, group func(i int) string, cols []aggCol) aggTable {
	t := aggTable{ID: id, First: first, Heads: cols, N: n, Aggregated: n > maxTableRows}
	row := func(i int, class string) aggRow {
		r := aggRow{Cells: []string{name(i)}, Class: class}
		for _, c := range cols {
			r.Cells = append(r.Cells, c.Text(i))
		}
		return r
	}
	for i := 0; i < n; i++ {
		t.All = append(t.All, row(i, ""))
	}
	if !t.Aggregated {
		t.Rows = t.All
		return t
	}
	var order []string
	groups := map[string][]int{}
	var pinned []int
	for i := 0; i < n; i++ {
		g := group(i)
		if g == "=" {
			pinned = append(pinned, i)
			continue
		}
		if groups[g] == nil {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	for _, g := range order {
		idx := groups[g]
		var nodes []string
		for _, i := range idx {
			nodes = append(nodes, node(i))
		}
		label := fmt.Sprintf("%d %s", len(idx), slurm.CompressHostlist(nodes))
		if g != "" {
			label += " " + g
		}
		grp := aggGroup{Name: g, Hostlist: slurm.CompressHostlist(nodes), N: len(idx)}
		rows := map[string]*aggRow{}
		for _, k := range []string{"min", "median", "max"} {
			rows[k] = &aggRow{Cells: []string{k + " of " + label}, Class: "agg"}
		}
		out := map[int][]string{}
		for _, c := range cols {
			if c.Num == nil {
				// Words: the same on every row (the node's name read
				// as "<node>"), else how many differ.
				seen := map[string]bool{}
				s := ""
				for _, i := range idx {
					s = nodeless(c.Text(i), node(i))
					seen[s] = true
				}
				if len(seen) > 1 {
					s = fmt.Sprintf("(%d different)", len(seen))
				} else if len(idx) == 1 {
					s = c.Text(idx[0])
				}
				for _, k := range []string{"min", "median", "max"} {
					rows[k].Cells = append(rows[k].Cells, s)
				}
				continue
			}
			var vs []float64
			lo, hi := -1, -1
			for _, i := range idx {
				v := c.Num(i)
				if math.IsNaN(v) {
					continue
				}
				vs = append(vs, v)
				if lo < 0 || v < c.Num(lo) {
					lo = i
				}
				if hi < 0 || v > c.Num(hi) {
					hi = i
				}
			}
			if len(vs) == 0 {
				for _, k := range []string{"min", "median", "max"} {
					rows[k].Cells = append(rows[k].Cells, "-")
				}
				continue
			}
			m := median(vs)
			dev := make([]float64, len(vs))
			for j, v := range vs {
				dev[j] = math.Abs(v - m)
			}
			mad := median(dev)
			at := func(i int) string {
				var same []string
				for _, j := range idx {
					if c.Num(j) == c.Num(i) {
						same = append(same, node(j))
					}
				}
				if len(same) == len(idx) {
					return ""
				}
				if len(same) > 3 {
					return fmt.Sprintf(" (%d nodes)", len(same))
				}
				return " (" + slurm.CompressHostlist(same) + ")"
			}
			rows["min"].Cells = append(rows["min"].Cells, c.Fmt(c.Num(lo))+at(lo))
			rows["median"].Cells = append(rows["median"].Cells, c.Fmt(m))
			rows["max"].Cells = append(rows["max"].Cells, c.Fmt(c.Num(hi))+at(hi))
			grp.Figures = append(grp.Figures, [4]string{c.Head, c.Fmt(c.Num(lo)) + at(lo), c.Fmt(m), c.Fmt(c.Num(hi)) + at(hi)})
			for _, i := range idx {
				if v := c.Num(i); !math.IsNaN(v) && outlying(v, m, mad) {
					out[i] = append(out[i], c.Head)
				}
			}
		}
		t.Rows = append(t.Rows, *rows["min"], *rows["median"], *rows["max"])
		t.Groups = append(t.Groups, grp)
		for _, i := range idx {
			if cs := out[i]; len(cs) > 0 {
				r := row(i, "outlier")
				r.Cells[0] = "outlier " + r.Cells[0] + " (" + strings.Join(cs, ", ") + ")"
				t.Rows = append(t.Rows, r)
				t.Outliers = append(t.Outliers, name(i))
				t.OutlierRows = append(t.OutlierRows, i)
			}
		}
	}
	for _, i := range pinned {
		t.Rows = append(t.Rows, row(i, ""))
	}
	return t
}

// nodeless is text with the node's name read as "<node>"; a text cut at
// its bound ("...") is cut at its last "/" or space instead, where it
// would end on any node.
func nodeless(text, node string) string {
	if node == "" {
		return text
	}
	text = strings.ReplaceAll(text, node, "<node>")
	if w, ok := strings.CutSuffix(text, "..."); ok {
		if k := strings.LastIndexAny(w, "/ "); k > 0 {
			text = w[:k+1] + "..."
		}
	}
	return text
}

// fv is a Value as a float (NaN when not known).
func fv(v Value) float64 { return float64(v) }

func fmtP(p int) func(float64) string { return func(v float64) string { return f(Value(v), p) } }

// htmlTables are the per-node tables of the page (and, aggregated, of the
// text): model servers, GPUs, hosts and cgroups.
func (r *Report) htmlTables() map[string]aggTable {
	tables := map[string]aggTable{}
	ms := r.ModelServers
	tables["servers"] = buildAggTable("servers", "server", len(ms),
		func(i int) string { return strings.TrimSpace(ms[i].Node + " " + ms[i].Producer + " " + ms[i].Model) },
		func(i int) string { return ms[i].Node }, func(i int) string {
			if ms[i].Node == "(all)" {
				return "="
			}
			return ""
		},
		[]aggCol{
			{Head: "requests", Text: func(i int) string { return f(ms[i].Requests, 0) }, Num: func(i int) float64 { return fv(ms[i].Requests) }, Fmt: fmtP(0)},
			{Head: "prompt tokens", Text: func(i int) string { return f(ms[i].PromptTokens, 0) }, Num: func(i int) float64 { return fv(ms[i].PromptTokens) }, Fmt: fmtP(0)},
			{Head: "generation tokens", Text: func(i int) string { return f(ms[i].GenerationTokens, 0) }, Num: func(i int) float64 { return fv(ms[i].GenerationTokens) }, Fmt: fmtP(0)},
			{Head: "prompt tok/s", Text: func(i int) string { return f(ms[i].PromptTokensPerSecond, 1) }, Num: func(i int) float64 { return fv(ms[i].PromptTokensPerSecond) }, Fmt: fmtP(1)},
			{Head: "gen tok/s", Text: func(i int) string { return f(ms[i].GenerationTokensPerSecond, 1) }, Num: func(i int) float64 { return fv(ms[i].GenerationTokensPerSecond) }, Fmt: fmtP(1)},
			{Head: "over (s)", Text: func(i int) string { return f(ms[i].RateWindowSeconds, 1) }, Num: func(i int) float64 { return fv(ms[i].RateWindowSeconds) }, Fmt: fmtP(1)},
			{Head: "e2e latency (s)", Left: true, Text: func(i int) string { return quantOrNot(ms[i].E2ELatency, 3) }},
			{Head: "time to first token (s)", Left: true, Text: func(i int) string { return quantOrNot(ms[i].TTFT, 3) }},
		})
	gs := r.GPUs
	tables["gpus"] = buildAggTable("gpus", "GPU", len(gs),
		func(i int) string { return gs[i].Node + " gpu " + gs[i].GPU },
		func(i int) string { return gs[i].Node }, func(i int) string { return "gpu " + gs[i].GPU },
		[]aggCol{
			{Head: "MIG instance", Left: true, Text: func(i int) string {
				if gs[i].Instance == "" {
					return ""
				}
				return gs[i].Instance + " (" + gs[i].Profile + ")"
			}},
			{Head: "model", Left: true, Text: func(i int) string { return gs[i].Model }},
			{Head: "util mean %", Text: func(i int) string { return f(gs[i].UtilMean, 1) }, Num: func(i int) float64 { return fv(gs[i].UtilMean) }, Fmt: fmtP(1)},
			{Head: "util max %", Text: func(i int) string { return f(gs[i].UtilMax, 0) }, Num: func(i int) float64 { return fv(gs[i].UtilMax) }, Fmt: fmtP(0)},
			{Head: "mem max MiB", Text: func(i int) string { return f(gs[i].MemoryUsedMax, 0) }, Num: func(i int) float64 { return fv(gs[i].MemoryUsedMax) }, Fmt: fmtP(0)},
			{Head: "power mean W", Text: func(i int) string { return f(gs[i].PowerMean, 1) }, Num: func(i int) float64 { return fv(gs[i].PowerMean) }, Fmt: fmtP(1)},
			{Head: "power max W", Text: func(i int) string { return f(gs[i].PowerMax, 1) }, Num: func(i int) float64 { return fv(gs[i].PowerMax) }, Fmt: fmtP(1)},
			{Head: "idle", Text: func(i int) string {
				if gs[i].Idle {
					return "idle"
				}
				return ""
			}},
			{Head: "attribution", Left: true, Text: func(i int) string { return gs[i].Attribution }},
		})
	hs := r.Hosts
	tables["hosts"] = buildAggTable("hosts", "node", len(hs),
		func(i int) string { return hs[i].Node }, func(i int) string { return hs[i].Node }, func(i int) string { return "" },
		[]aggCol{
			{Head: "CPUs", Text: func(i int) string { return fmt.Sprint(hs[i].CPUs) }, Num: func(i int) float64 { return float64(hs[i].CPUs) }, Fmt: fmtP(0)},
			{Head: "busy", Text: func(i int) string {
				if !hs[i].CPUBusy.Known() {
					return "- (needs two scrapes)"
				}
				return pct(hs[i].CPUBusy)
			}, Num: func(i int) float64 { return fv(hs[i].CPUBusy) }, Fmt: func(v float64) string { return pct(Value(v)) }},
			{Head: "memory used max", Text: func(i int) string { return bytesH(hs[i].MemoryUsedMax) }, Num: func(i int) float64 { return fv(hs[i].MemoryUsedMax) }, Fmt: func(v float64) string { return bytesH(Value(v)) }},
			{Head: "memory total", Text: func(i int) string { return bytesH(hs[i].MemoryTotal) }, Num: func(i int) float64 { return fv(hs[i].MemoryTotal) }, Fmt: func(v float64) string { return bytesH(Value(v)) }},
			{Head: "load1 max", Text: func(i int) string { return f(hs[i].Load1Max, 2) }, Num: func(i int) float64 { return fv(hs[i].Load1Max) }, Fmt: fmtP(2)},
		})
	cs := r.Cgroups
	secsOr := func(i int, fam string, v Value) string {
		return notKeptOr(cs[i], fam, v, func(v Value) string { return fmt.Sprintf("%.2f s", float64(v)) })
	}
	tables["cgroups"] = buildAggTable("cgroups", "group", len(cs),
		func(i int) string { return cs[i].Node + " " + strings.TrimSpace(cs[i].Group+" "+cs[i].Step) },
		func(i int) string { return cs[i].Node }, func(i int) string { return strings.TrimSpace(cs[i].Group + " " + cs[i].Step) },
		[]aggCol{
			{Head: "CPU", Text: func(i int) string { return secsOr(i, "cpu_usage", cs[i].CPUSeconds) }, Num: func(i int) float64 { return fv(cs[i].CPUSeconds) }, Fmt: func(v float64) string { return fmt.Sprintf("%.2f s", v) }},
			{Head: "throttled", Text: func(i int) string { return secsOr(i, "cpu_throttling", cs[i].CPUThrottledSeconds) }, Num: func(i int) float64 { return fv(cs[i].CPUThrottledSeconds) }, Fmt: func(v float64) string { return fmt.Sprintf("%.2f s", v) }},
			{Head: "memory peak", Text: func(i int) string { return notKeptOr(cs[i], "memory_peak", cs[i].MemoryPeakBytes, bytesH) }, Num: func(i int) float64 { return fv(cs[i].MemoryPeakBytes) }, Fmt: func(v float64) string { return bytesH(Value(v)) }},
			{Head: "OOM kills", Text: func(i int) string {
				return notKeptOr(cs[i], "oom_kills", cs[i].OOMKills, func(v Value) string { return f(v, 0) })
			}, Num: func(i int) float64 { return fv(cs[i].OOMKills) }, Fmt: fmtP(0)},
			{Head: "cpu pressure", Left: true, Text: func(i int) string { return psiText(cs[i], "cpu_pressure", cs[i].CPUPressure) }},
			{Head: "memory pressure", Left: true, Text: func(i int) string { return psiText(cs[i], "memory_pressure", cs[i].MemoryPressure) }},
			{Head: "io pressure", Left: true, Text: func(i int) string { return psiText(cs[i], "io_pressure", cs[i].IOPressure) }},
			{Head: "not kept", Left: true, Text: func(i int) string {
				var s []string
				for fam, why := range cs[i].NotKept {
					s = append(s, fam+": "+why)
				}
				sort.Strings(s)
				return strings.Join(s, "; ")
			}},
		})
	se := r.StepEnergy
	tables["step-energy"] = buildAggTable("step-energy", "node", len(se),
		func(i int) string { return se[i].Node }, func(i int) string { return se[i].Node },
		func(i int) string { return stepEnergyGroup(se[i]) },
		[]aggCol{
			{Head: "step", Left: true, Text: func(i int) string { return strings.TrimPrefix(stepEnergyGroup(se[i]), "step ") }},
			{Head: "window s", Text: func(i int) string { return f(se[i].WindowSeconds, 2) }, Num: func(i int) float64 { return fv(se[i].WindowSeconds) }, Fmt: fmtP(2)},
			{Head: "J", Text: func(i int) string { return f(se[i].Joules, 1) }, Num: func(i int) float64 { return fv(se[i].Joules) }, Fmt: fmtP(1)},
			{Head: "window's own J from", Text: func(i int) string {
				if !se[i].ErrorJoules.Known() {
					return "-"
				}
				return f(se[i].Joules-se[i].ErrorJoules, 1)
			}},
			{Head: "bracket s", Text: func(i int) string { return f(se[i].BracketSeconds, 2) }, Num: func(i int) float64 { return fv(se[i].BracketSeconds) }, Fmt: fmtP(2)},
			{Head: "max gap s", Text: func(i int) string { return f(se[i].MaxGapSeconds, 2) }, Num: func(i int) float64 { return fv(se[i].MaxGapSeconds) }, Fmt: fmtP(2)},
			{Head: "from", Left: true, Text: func(i int) string { return se[i].Source }},
			{Head: "GPUs", Text: func(i int) string { return fmt.Sprint(len(se[i].GPUs)) }, Num: func(i int) float64 { return float64(len(se[i].GPUs)) }, Fmt: fmtP(0)},
			{Head: "verdict", Left: true, Text: func(i int) string {
				if se[i].Verdict.Trusted {
					return "trusted"
				}
				return "not trusted: " + strings.Join(se[i].Verdict.Why, "; ")
			}},
		})
	he := r.HostEnergy
	tables["host-energy"] = buildAggTable("host-energy", "node", len(he),
		func(i int) string { return he[i].Node }, func(i int) string { return he[i].Node },
		func(i int) string { return hostRowName(he[i], false) },
		[]aggCol{
			{Head: "window", Left: true, Text: func(i int) string { return hostRowName(he[i], false) }},
			{Head: "J", Text: func(i int) string { return f(he[i].Joules, 1) }, Num: func(i int) float64 { return fv(he[i].Joules) }, Fmt: fmtP(1)},
			{Head: "W", Text: func(i int) string { return f(he[i].Watts, 1) }, Num: func(i int) float64 { return fv(he[i].Watts) }, Fmt: fmtP(1)},
			{Head: "window's own J from", Text: func(i int) string {
				if !he[i].ErrorJoules.Known() {
					return "-"
				}
				return f(he[i].Joules-he[i].ErrorJoules, 1)
			}},
			{Head: "bracket s", Text: func(i int) string { return f(he[i].BracketSeconds, 2) }, Num: func(i int) float64 { return fv(he[i].BracketSeconds) }, Fmt: fmtP(2)},
			{Head: "max gap s", Text: func(i int) string { return f(he[i].MaxGapSeconds, 2) }, Num: func(i int) float64 { return fv(he[i].MaxGapSeconds) }, Fmt: fmtP(2)},
			{Head: "from", Left: true, Text: func(i int) string { return he[i].Source }},
			{Head: "zones or sensors", Left: true, Text: func(i int) string { return strings.Join(he[i].Zones, " + ") }},
			{Head: "verdict", Left: true, Text: func(i int) string {
				if he[i].Verdict.Trusted {
					return "trusted"
				}
				return "not trusted: " + strings.Join(he[i].Verdict.Why, "; ")
			}},
		})
	return tables
}

// stepEnergyGroup names the step of a StepEnergy row, the rows of one step
// (of one run, of one chain link) aggregated together over the nodes.
func stepEnergyGroup(e StepEnergy) string {
	g := "step " + e.Step + runName(e.Restart)
	if e.Link != "" {
		g = "link " + e.Link + " " + g
	}
	return g
}

func quantOrNot(q Quantiles, p int) string {
	if q.Count == 0 {
		return "- (not sent)"
	}
	return quant(q, p)
}

// psiText is a pressure figure as the page's cgroup table writes it.
func psiText(u CgroupUsage, fam string, p Pressure) string {
	if !p.SomeSeconds.Known() {
		return notKeptOr(u, fam, p.SomeSeconds, nil)
	}
	s := fmt.Sprintf("some %.2f s", float64(p.SomeSeconds))
	if p.SomeShare.Known() {
		s += " (" + pct(p.SomeShare) + ")"
	}
	if p.FullSeconds.Known() {
		s += fmt.Sprintf(", full %.2f s", float64(p.FullSeconds))
		if p.FullShare.Known() {
			s += " (" + pct(p.FullShare) + ")"
		}
	}
	return s
}
