package inspect

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"

	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// Width is the terminal report's line width in columns: WriteText keeps
// every line within it (long values are cut with "...").
const Width = 100

// WriteText prints the report for a person, in sections, every line at
// most Width columns: first the outcome (the job's state, exit code,
// elapsed time and nodes, its rollouts and pass rate, what reached the
// backend) with what went wrong on the way to the backend, then Gym, the
// receipts (those that agree folded into one line), the job, its Slurm
// phases (aggregated over the nodes past 4 nodes) and the time from
// submit to the first rollout, the model servers, GPUs, hosts, the job's
// cgroups, spans, errors and the telemetry's health. Sections without
// data are left out.
func (r *Report) WriteText(w io.Writer) error {
	t := &textOut{w: w}
	t.line("%s", r.Dir)
	t.outcomeLines(r)
	t.gymLines(r)
	t.receiptLines(r)
	t.jobLines(r.Job)
	t.phaseLines(r)
	t.treeLines(r)
	t.modelServerLines(r)
	t.routerLines(r.Routers)
	t.gpuLines(r)
	t.energyLines(r)
	t.stepEnergyLines(r)
	t.hostEnergyLines(r)
	t.hostLines(r)
	t.cgroupLines(r)
	t.spanLines(r)
	t.errorLines(r.Errors)
	t.healthLines(r.Health)
	return t.err
}

// outcomeLines writes the outcome block (Outcome) and the trouble lines:
// the report's first lines.
func (t *textOut) outcomeLines(r *Report) {
	o := r.Outcome
	head := "== outcome"
	if o.JobID != "" {
		head += ": job " + o.JobID
	}
	state := o.State
	if o.ExitCode != nil {
		state += fmt.Sprintf(", exit code %d", *o.ExitCode)
	}
	if o.Signal != nil {
		state += fmt.Sprintf(", signal %d", *o.Signal)
	}
	why := o.StateFrom
	switch {
	case o.StateFrom == "derived":
		why = "derived: " + o.StateWhy
	case o.StateFrom == "unknown":
		why = o.StateWhy
	}
	if o.Sacct != "" {
		why += "; sacct " + sacctShort(o.Sacct)
	}
	t.wrapHanging(head+" ", "  ", state+" ("+why+")")
	el := "unknown (" + o.ElapsedWhy + ")"
	if o.ElapsedSeconds.Known() {
		el = fmt.Sprintf("%s (%s)", elapsed(o.ElapsedSeconds), o.ElapsedFrom)
	}
	if o.QueueWaitSeconds.Known() {
		el += fmt.Sprintf(", after a queue wait of %s", elapsed(o.QueueWaitSeconds))
	}
	t.wrap(fmt.Sprintf("  %-10s ", "elapsed"), el)
	t.wrap(fmt.Sprintf("  %-10s ", "nodes"), fmt.Sprintf("%d %s", o.Nodes, o.Hostlist))
	gym := "no rollouts in the files"
	if o.Rollouts.Known() {
		gym = fmt.Sprintf("%s rollouts, pass rate %s", f(o.Rollouts, 0), pct(o.PassRate))
		if o.Verified.Known() {
			gym += fmt.Sprintf(" of %s verified", f(o.Verified, 0))
		} else {
			gym += " (no verify results)"
		}
		if o.RolloutsPerMinute.Known() {
			gym += fmt.Sprintf(", %s rollouts per minute", f(o.RolloutsPerMinute, 1))
		}
	}
	t.wrap(fmt.Sprintf("  %-10s ", "gym"), gym)
	// What went wrong on the way is said once, by the trouble lines.
	switch {
	case o.DeliveryState == "lost" && len(r.Trouble) > 0:
		t.line("  %-10s NOT everything reached it:", "backend")
	case o.DeliveryState == "unknown" && len(r.Trouble) > 0:
		t.line("  %-10s what reached it is unknown:", "backend")
	default:
		t.wrap(fmt.Sprintf("  %-10s ", "backend"), o.Delivery)
	}
	for _, l := range r.Trouble {
		t.wrap("  ! ", l)
	}
}

// receiptLines writes the receipts: those without trouble folded by what
// they say ("16 nodes gn[1-16]: final figures, nothing failed"), each
// with trouble on its own lines, the dirs without one folded.
func (t *textOut) receiptLines(r *Report) {
	if len(r.Receipts) == 0 {
		return
	}
	t.section("receipts (what each node's collector received, wrote and sent)")
	names := map[string]string{}
	for _, d := range r.Health.Dirs {
		names[filepath.Clean(d.Dir)] = nodeOr(d)
	}
	byNode := map[string]NodeReceipt{}
	var nodes []string
	for _, nr := range r.Receipts {
		n := names[filepath.Clean(nr.Dir)]
		if nr.Receipt != nil && nr.Receipt.Node != "" {
			n = nr.Receipt.Node
		}
		if n == "" {
			n = nr.Dir
		}
		if _, dup := byNode[n]; dup {
			n += " (" + nr.Dir + ")"
		}
		byNode[n] = nr
		nodes = append(nodes, n)
	}
	keys, lists := nodeGroups(nodes, func(n string) string { return receiptKey(byNode[n]) })
	for _, k := range keys {
		ns := lists[k]
		if k == "" { // trouble: each node its own lines
			for _, n := range ns {
				for _, l := range byNode[n].Summary {
					lead := l[:len(l)-len(strings.TrimLeft(l, " "))]
					t.wrap("  "+lead, strings.TrimSpace(l))
				}
			}
			continue
		}
		var rcs []*receipt.Receipt
		for _, n := range ns {
			if rc := byNode[n].Receipt; rc != nil {
				rcs = append(rcs, rc)
			}
		}
		line := fmt.Sprintf("%d %s %s: %s", len(ns), plural(len(ns), "node"), slurm.CompressHostlist(ns), k)
		if len(rcs) > 0 && rcs[0].Delivery != nil {
			var acked int64
			for _, rc := range rcs {
				if d := rc.Delivery; d != nil {
					acked += d.Accepted
				}
			}
			line += fmt.Sprintf(" (backend copy complete: %d items delivered from the files)", acked)
		} else if len(rcs) > 0 {
			sent, app := sentText(rcs)
			if app != "" {
				app = fmt.Sprintf("; %s of them by the supervisor after the collector's exit", app)
			}
			line += fmt.Sprintf(" (sent to the backend: %s%s)", sent, app)
		}
		t.wrap("  ", line)
	}
}

// receiptKey is what a receipt without trouble says, for folding ("" for
// a receipt with trouble: it is shown whole).
func receiptKey(nr NodeReceipt) string {
	rc := nr.Receipt
	if rc == nil {
		return "no receipt.json (what reached the backend is unknown there)"
	}
	if rc.Trouble() || undeliveredAppended(rc) > 0 || deliveryTrouble(rc) {
		return ""
	}
	head := nr.Summary[0]
	if i := strings.Index(head, ": "); i >= 0 {
		head = head[i+2:]
	} else {
		head = "figures"
	}
	if rc.Collectors > 1 {
		head = fmt.Sprintf("%d collector runs, %s", rc.Collectors, head)
	}
	return head + ", nothing failed"
}

// jobLines writes the job section: identity, time span, nodes, producers.
func (t *textOut) jobLines(j Job) {
	t.section("job")
	for _, k := range identityKeys {
		if v := j.Identity[k]; k == "host.name" && len(v) > 0 {
			t.wrap(fmt.Sprintf("  %-24s ", k), slurm.CompressHostlist(Texts(v)))
		} else if len(v) > 0 {
			t.line("  %-24s %s", k, strings.Join(textForms(v), ", "))
		}
	}
	if !j.Start.IsZero() {
		t.line("  %-24s %s .. %s (%s)", "time span (UTC)", j.Start.Format("2006-01-02 15:04:05.000"), j.End.Format("15:04:05.000"), secs(j.DurationSeconds))
	}
	t.nodes(j.Nodes)
	var prods []string
	for p, n := range j.Producers {
		prods = append(prods, fmt.Sprintf("%s (%d)", p, n))
	}
	sort.Strings(prods)
	t.wrap(fmt.Sprintf("  %-24s ", "producers (items)"), strings.Join(prods, ", "))
}

// gymLines writes the gym section (rollouts, verify, Gym's attributed
// telemetry) when Gym sent anything, with why rollouts and verify are
// missing when they are; else the section's one line saying why it is
// absent.
func (t *textOut) gymLines(r *Report) {
	g := r.Gym
	if g.RolloutSpans.Count > 0 || g.RolloutHistogram.Count > 0 || len(g.Verify) > 0 || len(g.VerifySpans) > 0 || !g.Telemetry.Empty() {
		t.section("gym")
		if g.RolloutSpans.Count > 0 {
			t.line("  %-24s %s", "rollouts (spans, ms)", quant(g.RolloutSpans, 1))
		}
		if g.RolloutHistogram.Count > 0 {
			t.line("  %-24s %s", "rollouts (histogram, ms)", quant(g.RolloutHistogram, 1))
		}
		if g.RolloutsPerMinute.Known() {
			t.line("  %-24s %s in %s (%s): %s per minute", "rollout throughput", f(g.RolloutsCounted, 0), dur(g.RolloutsWindowSeconds),
				map[bool]string{true: "first span's start to last span's end", false: "the run's time span"}[g.RolloutSpans.Count > 0],
				f(g.RolloutsPerMinute, 1))
		}
		if len(g.Verify) > 0 || len(g.VerifySpans) > 0 {
			t.line("  %-24s metric %s; spans %s; success %s", "verify", counts(g.Verify), countsInt(g.VerifySpans), pct(g.VerifySuccess))
		}
		if g.VerifyLatency.Count > 0 {
			t.line("  %-24s %s", "verify latency (ms)", quant(g.VerifyLatency, 1))
		}
		t.gymTelemetryLines(g)
		// The section is open: what is missing in it is a line of it,
		// not a second "== gym".
		if a := r.absent("gym"); a != nil {
			t.wrap(fmt.Sprintf("  %-24s %s ", "rollouts and verify", a.Why), "("+a.Detail+")")
		}
		return
	}
	t.absent(r, "gym", "gym")
}

// aggLines writes a per-node table aggregated (more than maxTableRows
// rows): per group its rows' count and nodes, and a line a figure with its
// min, median and max over them (the nodes of the min and the max); the
// section writes the outliers' rows after it.
func (t *textOut) aggLines(tb aggTable, what string) {
	for _, g := range tb.Groups {
		head := fmt.Sprintf("%d %s on %s", g.N, what, g.Hostlist)
		if g.Name != "" {
			head = fmt.Sprintf("%s on %d nodes %s", g.Name, g.N, g.Hostlist)
		}
		if len(g.Figures) == 0 {
			t.wrap("  ", head+": no figures (not kept, below)")
			continue
		}
		t.wrap("  ", head+": min / median / max over them (the nodes of the min and the max; --json lists each)")
		for _, fg := range g.Figures {
			t.wrap(fmt.Sprintf("    %-20s ", cut(fg[0], 20)), fg[1]+" / "+fg[2]+" / "+fg[3])
		}
	}
	if len(tb.OutlierRows) == 0 {
		t.line("  no outliers (no figure 3 scaled median absolute deviations and 20%% from the median)")
	} else {
		t.wrap("  ", fmt.Sprintf("%d outliers (a figure 3 scaled median absolute deviations and 20%% from the median), in full:", len(tb.OutlierRows)))
	}
}

// modelServerLines writes the model servers section, one block per vLLM
// server and the "(all)" sum (past maxTableRows servers, their figures
// aggregated and the outliers' blocks), or why it is absent.
func (t *textOut) modelServerLines(r *Report) {
	t.absent(r, "model servers", "model servers (vLLM)")
	if len(r.ModelServers) == 0 {
		return
	}
	t.section("model servers (vLLM)")
	shown := r.ModelServers
	if tb := r.htmlTables()["servers"]; tb.Aggregated {
		t.aggLines(tb, "servers")
		shown = nil
		for _, i := range tb.OutlierRows {
			shown = append(shown, r.ModelServers[i])
		}
		for _, m := range r.ModelServers {
			if m.Node == "(all)" {
				shown = append(shown, m)
			}
		}
	}
	for _, m := range shown {
		name := m.Node
		if m.Producer != "" {
			name += " " + m.Producer
		}
		if m.Model != "" {
			name += " model " + m.Model
		}
		t.line("  %s", name)
		t.line("    requests %s, prompt tokens %s, generation tokens %s%s", fw(m.Requests, 0, "not sent"), fw(m.PromptTokens, 0, "not sent"),
			fw(m.GenerationTokens, 0, "not sent"), resets(m.CounterResets))
		switch {
		case m.RateWindowSeconds.Known() && m.Node == "(all)":
			t.line("    tokens/s (sum of the servers' rates, windows up to %s): prompt %s, generation %s",
				dur(m.RateWindowSeconds), fw(m.PromptTokensPerSecond, 1, "not sent"), fw(m.GenerationTokensPerSecond, 1, "not sent"))
		case m.RateWindowSeconds.Known():
			t.line("    tokens/s over %s (first to last scrape): prompt %s, generation %s", dur(m.RateWindowSeconds),
				fw(m.PromptTokensPerSecond, 1, "not sent"), fw(m.GenerationTokensPerSecond, 1, "not sent"))
		case m.PromptTokens.Known() || m.GenerationTokens.Known():
			t.line("    tokens/s - (%s)", WhyTwoScrapes)
		}
		if m.E2ELatency.Count > 0 {
			t.line("    e2e latency (s)   %s", quant(m.E2ELatency, 3))
		}
		if m.TTFT.Count > 0 {
			t.line("    time to 1st token %s", quant(m.TTFT, 3))
		}
		if m.InterToken.Count > 0 {
			t.line("    inter-token (s)   %s", quant(m.InterToken, 4))
		}
		if m.RunningMax.Known() || m.WaitingMax.Known() || m.KVCacheMax.Known() {
			gauge := func(name string, mean, max Value, percent bool) string {
				switch {
				case !mean.Known():
					return name + " - (not sent)"
				case percent:
					return fmt.Sprintf("%s mean %s max %s", name, pct(mean), pct(max))
				}
				return fmt.Sprintf("%s mean %s max %s", name, f(mean, 1), f(max, 0))
			}
			t.line("    %s, %s, %s", gauge("running", m.RunningMean, m.RunningMax, false), gauge("waiting", m.WaitingMean, m.WaitingMax, false),
				gauge("KV cache", m.KVCacheMean, m.KVCacheMax, true))
		}
	}
}

// routerLines writes the routers section: each vllm-router's routed
// requests and what each worker got.
func (t *textOut) routerLines(routers []Router) {
	if len(routers) == 0 {
		return
	}
	t.section("routers (vllm-router)")
	for _, ro := range routers {
		t.line("  %s %s: requests routed %s", ro.Node, ro.Producer, fw(ro.Requests, 0, "not sent"))
		for _, w := range ro.Workers {
			stage := w.Stage
			if stage == "" {
				stage = "worker"
			}
			t.line("    %-8s %s  %s", stage, w.Worker, fw(w.Requests, 0, "not sent"))
		}
	}
}

// gpuLines writes the GPUs section (a table, the idle GPUs and the
// sharing lines), or why it is absent.
func (t *textOut) gpuLines(r *Report) {
	t.absent(r, "GPUs", "GPUs (dcgm-exporter)")
	if len(r.GPUs) == 0 {
		return
	}
	t.section("GPUs (dcgm-exporter)")
	shown := r.GPUs
	if tb := r.htmlTables()["gpus"]; tb.Aggregated {
		t.aggLines(tb, "GPUs")
		shown = nil
		for _, i := range tb.OutlierRows {
			shown = append(shown, r.GPUs[i])
		}
		var idle []string
		for _, x := range r.GPUs {
			if x.Idle {
				idle = append(idle, x.Node)
			}
		}
		if len(idle) > 0 {
			t.wrap("  idle the whole run: ", fmt.Sprintf("%d GPUs on %s", len(idle), slurm.CompressHostlist(dedup(idle))))
		}
		if len(shown) == 0 {
			t.sharingLines(r)
			return
		}
	}
	t.line("  %-14s %4s %-22s %9s %8s %14s %9s %9s", "node", "gpu", "model", "util mean", "util max", "mem max (MiB)", "power W", "power max")
	var idle []string
	dash := false
	for _, x := range shown {
		dash = dash || !x.UtilMean.Known() || !x.MemoryUsedMax.Known() || !x.PowerMean.Known()
		gpu := x.GPU
		if x.Instance != "" {
			gpu += "/" + x.Instance // a MIG instance
		}
		t.line("  %-14s %4s %-22s %8s%% %7s%% %14s %9s %9s", cut(x.Node, 14), gpu, cut(x.Model, 22), f(x.UtilMean, 1), f(x.UtilMax, 0),
			f(x.MemoryUsedMax, 0), f(x.PowerMean, 1), f(x.PowerMax, 1))
		if x.Idle {
			idle = append(idle, x.Node+"/"+gpu)
		}
	}
	if len(idle) > 0 && len(shown) == len(r.GPUs) {
		t.wrap("  idle the whole run: ", strings.Join(idle, ", "))
	}
	if dash {
		t.line("  (-: a field dcgm-exporter did not send)")
	}
	t.sharingLines(r)
}

// hostLines writes the hosts section, one line per node, or why it is
// absent.
func (t *textOut) hostLines(r *Report) {
	t.absent(r, "hosts", "hosts (node_exporter)")
	if len(r.Hosts) == 0 {
		return
	}
	t.section("hosts (node_exporter)")
	shown := r.Hosts
	if tb := r.htmlTables()["hosts"]; tb.Aggregated {
		t.aggLines(tb, "hosts")
		shown = nil
		for _, i := range tb.OutlierRows {
			shown = append(shown, r.Hosts[i])
		}
	}
	for _, h := range shown {
		busy := pct(h.CPUBusy)
		switch {
		case !h.CPUBusy.Known() && h.CPUs > 0:
			busy += " (" + WhyTwoScrapes + ")"
		case !h.CPUBusy.Known():
			busy += " (not sent)"
		}
		mem := "memory - (not sent)"
		if h.MemoryTotal.Known() {
			mem = fmt.Sprintf("memory %s of %s used at most", bytesH(h.MemoryUsedMax), bytesH(h.MemoryTotal))
		}
		t.line("  %-14s %d CPUs, busy %s; %s; load1 max %s", cut(h.Node, 14), h.CPUs, busy, mem, fw(h.Load1Max, 2, "not sent"))
	}
}

// dedup is names without repeats, in their order.
func dedup(names []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// spanLines writes the spans section (by total time, by p99, the slowest,
// the span metrics), or why it is absent.
func (t *textOut) spanLines(r *Report) {
	t.absent(r, "spans", "spans")
	s := r.Spans
	if s.Total == 0 && len(s.SpanMetrics) == 0 {
		return
	}
	if s.PhaseSpans == 0 {
		t.section(fmt.Sprintf("spans (%d)", s.Total))
	} else {
		t.section(fmt.Sprintf("spans (%d of the job's)", s.Total))
		t.wrap("  ", fmt.Sprintf("the files hold %d spans: these %d and the %d Slurm phase spans (the plugin's, under Slurm phases)",
			s.InFiles, s.Total, s.PhaseSpans))
	}
	if len(s.ByName) > 0 {
		t.line("  %-30s %-16s %7s %11s %9s %9s %9s", "by total time: name", "producer", "count", "total ms", "p50 ms", "p99 ms", "max ms")
		for i, x := range s.ByName {
			if i == 10 {
				t.line("  ... %d more names", len(s.ByName)-10)
				break
			}
			t.line("  %-30s %-16s %7d %11s %9s %9s %9s", cut(x.Name, 30), cut(x.Producer, 16), int(x.Duration.Count), f(Value(x.TotalMs), 1),
				f(x.Duration.P50, 1), f(x.Duration.P99, 1), f(x.Duration.Max, 1))
		}
		var top []string
		for i, x := range s.ByP99 {
			if i == 5 {
				break
			}
			top = append(top, fmt.Sprintf("%s %s ms", x.Name, f(x.Duration.P99, 1)))
		}
		t.wrap("  by p99: ", strings.Join(top, ", "))
	}
	if len(s.Slowest) > 0 {
		t.line("  slowest:")
		for i, x := range s.Slowest {
			if i == 5 {
				break
			}
			t.line("    %10s ms  %-28s %-12s trace %s", f(Value(x.DurationMs), 1), cut(x.Name, 28), cut(x.Node, 12), x.TraceID)
		}
	}
	if len(s.SpanMetrics) > 0 {
		t.line("  span metrics (traces.span.metrics.*, by span name; durations from the raw spans where they exist):")
		for _, x := range s.SpanMetrics {
			from := "connector's buckets"
			if x.DurationFrom == "spans" {
				from = fmt.Sprintf("%d raw %s", x.Spans, plural(x.Spans, "span"))
			}
			t.line("    %-30s calls %6s  %s  (%s)", cut(x.Name, 30), f(x.Calls, 0), quantShort(x.Duration, 1, "ms"), from)
			if x.CallsNote != "" {
				t.wrap("      note: ", x.CallsNote)
			}
		}
	}
}

// errorLines writes the errors section: the counts and the first examples.
func (t *textOut) errorLines(e Errors) {
	t.section("errors")
	t.line("  %d error spans, %d error log records; log records by severity: %s", e.Spans, e.Logs, countsInt(e.LogsBySeverity))
	for i, x := range e.SpanExamples {
		if i == 5 {
			t.line("    ... (--json lists %d)", len(e.SpanExamples))
			break
		}
		t.line("    span %s on %s, trace %s: %s", x.Name, x.Node, x.TraceID, x.Message)
	}
	for i, x := range e.LogExamples {
		if i == 5 {
			t.line("    ... (--json lists %d)", len(e.LogExamples))
			break
		}
		tr := ""
		if x.TraceID != "" {
			tr = " trace " + x.TraceID
		}
		t.line("    %s %s %s%s: %s", x.Time.Format("15:04:05.000"), x.Severity, x.Node, tr, strings.ReplaceAll(x.Body, "\n", " "))
	}
}

// healthLines writes the telemetry health section: each dir's lines,
// state and targets, and what the bounds dropped.
func (t *textOut) healthLines(hl Health) {
	t.section("telemetry health")
	// Past maxTableRows node dirs, the dirs whose health reads the same
	// but for the node's name fold into one block, their nodes as a
	// hostlist and "<node>" where the name was.
	fold := len(hl.Dirs) > maxTableRows
	var order []string
	nodes := map[string][]string{}
	for _, d := range hl.Dirs {
		name := d.NodeName
		if d.Link != "" {
			name += " (link " + d.Link + ")"
		}
		bad := ""
		if n := d.BadLines["metrics"] + d.BadLines["traces"] + d.BadLines["logs"]; n > 0 {
			bad = fmt.Sprintf(", %d did not parse", n)
		}
		block := []string{fmt.Sprintf("lines: metrics %d, traces %d, logs %d%s; %d points, %d spans, %d logs",
			d.Lines["metrics"], d.Lines["traces"], d.Lines["logs"], bad, d.Points, d.Spans, d.Logs)}
		for _, sig := range signals {
			if msg, ok := d.FirstBad[sig]; ok {
				block = append(block, fmt.Sprintf("    %s.jsonl first bad %s", sig, msg))
			}
			if n := d.Writing[sig]; n > 0 {
				block = append(block, fmt.Sprintf("    %s.jsonl: %d bytes of a line being written (the collector runs)", sig, n))
			}
		}
		if d.State != nil {
			st := fmt.Sprintf("    collector %s, %d restarts", d.State.Status, d.State.Restarts)
			if d.State.ExportProblems != "" {
				st += ", export problems: " + d.State.ExportProblems
			}
			block = append(block, st)
		}
		for _, x := range d.Targets {
			block = append(block, fmt.Sprintf("    target %s (%s): %s", x.Job, x.Instance, ScrapeSummary(x.Scrapes, x.Answered, x.WarmingUp, x.Ended)))
			if x.LimitHits.Any() {
				block = append(block, fmt.Sprintf("      LIMIT: %s", x.LimitHits))
			}
		}
		if !fold {
			t.line("  %-14s %s", cut(name, 14), block[0])
			for _, l := range block[1:] {
				t.line("%s", l)
			}
			continue
		}
		k := strings.Join(block, "\n")
		if d.NodeName != "" {
			k = strings.ReplaceAll(k, d.NodeName, "<node>")
		}
		if d.Link != "" {
			k = "link " + d.Link + "\n" + k
		}
		if nodes[k] == nil {
			order = append(order, k)
		}
		nodes[k] = append(nodes[k], d.NodeName)
	}
	for _, k := range order {
		ns, text := nodes[k], k
		if len(ns) == 1 {
			text = strings.ReplaceAll(k, "<node>", ns[0])
		}
		block := strings.Split(text, "\n")
		link := ""
		if strings.HasPrefix(block[0], "link ") {
			link, block = " ("+block[0]+")", block[1:]
		}
		head := slurm.CompressHostlist(ns) + link
		if len(ns) > 1 {
			head = fmt.Sprintf("%d nodes %s", len(ns), head)
		}
		t.wrap("  ", head+": "+block[0])
		for _, l := range block[1:] {
			t.line("%s", l)
		}
	}
	if hl.DroppedSeries > 0 || hl.SkippedPoints > 0 {
		t.line("  %d series over the bound not tracked, %d histogram points skipped (bounds changed)", hl.DroppedSeries, hl.SkippedPoints)
	}
}

// nodes writes the job's nodes as one Slurm hostlist in natural order
// (gn[1-16], gn2 before gn10); a hostlist wider than the line is wrapped
// between its entries, so no node is cut off.
func (t *textOut) nodes(nodes []string) {
	prefix := fmt.Sprintf("  %-24s ", "nodes")
	hl := slurm.CompressHostlist(nodes)
	if len(prefix)+len(hl) <= Width {
		t.line("%s%s", prefix, hl)
		return
	}
	// A space after each comma between entries (not inside brackets)
	// lets wrap break there.
	var b strings.Builder
	depth := 0
	for _, c := range hl {
		b.WriteRune(c)
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				b.WriteByte(' ')
			}
		}
	}
	t.wrap(prefix, b.String())
}

// elapsed is a job's time as seff shows it (h:mm:ss) with its seconds
// ("12.2 s" below two minutes).
func elapsed(v Value) string {
	s := float64(v)
	if s < 120 {
		return fmt.Sprintf("%.1f s", s)
	}
	n := int64(math.Round(s))
	return fmt.Sprintf("%d:%02d:%02d (%d s)", n/3600, n/60%60, n%60, n)
}

// sacctShort is why sacct did not answer, short enough for the outcome's
// first line (--json's outcome.sacct has the whole error): "not found",
// or the last part of its error ("did not answer: Slurm accounting
// storage is disabled").
func sacctShort(why string) string {
	rest, ok := strings.CutPrefix(why, "no answer: ")
	switch {
	case !ok:
		return why
	case strings.Contains(rest, "nor on PATH"):
		return "not found"
	}
	if i := strings.LastIndex(rest, ": "); i >= 0 {
		rest = rest[i+2:]
	}
	return "did not answer: " + cut(strings.TrimSpace(rest), 60)
}
