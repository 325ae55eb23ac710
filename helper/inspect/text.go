package inspect

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Width is the terminal report's line width in columns: WriteText keeps
// every line within it (long values are cut with "...").
const Width = 100

// WriteText prints the report for a person, in sections, every line at
// most Width columns: first what went wrong on the way to the backend
// (receipts), then the job, Gym, the model servers, GPUs, hosts, spans,
// errors and the telemetry's health. Sections without data are left out.
func (r *Report) WriteText(w io.Writer) error {
	t := &textOut{w: w}
	t.line("%s", r.Dir)
	for _, l := range r.Trouble {
		t.wrap("  ! ", l)
	}
	for _, nr := range r.Receipts {
		if nr.Receipt == nil {
			continue
		}
		for _, l := range nr.Summary {
			lead := l[:len(l)-len(strings.TrimLeft(l, " "))]
			t.wrap("  "+lead, strings.TrimSpace(l))
		}
	}

	j := r.Job
	t.section("job")
	for _, k := range identityKeys {
		if v := j.Identity[k]; len(v) > 0 {
			t.line("  %-24s %s", k, strings.Join(v, ", "))
		}
	}
	if !j.Start.IsZero() {
		t.line("  %-24s %s .. %s (%s)", "time span (UTC)", j.Start.Format("2006-01-02 15:04:05.000"), j.End.Format("15:04:05.000"), secs(j.DurationSeconds))
	}
	t.line("  %-24s %s", "nodes", strings.Join(j.Nodes, ", "))
	var prods []string
	for p, n := range j.Producers {
		prods = append(prods, fmt.Sprintf("%s (%d)", p, n))
	}
	sort.Strings(prods)
	t.wrap(fmt.Sprintf("  %-24s ", "producers (items)"), strings.Join(prods, ", "))

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
	}

	t.absent(r, "gym", "gym")
	t.absent(r, "model servers", "model servers (vLLM)")
	if len(r.ModelServers) > 0 {
		t.section("model servers (vLLM)")
		for _, m := range r.ModelServers {
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

	if len(r.Routers) > 0 {
		t.section("routers (vllm-router)")
		for _, ro := range r.Routers {
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

	t.absent(r, "GPUs", "GPUs (dcgm-exporter)")
	if len(r.GPUs) > 0 {
		t.section("GPUs (dcgm-exporter)")
		t.line("  %-14s %4s %-22s %9s %8s %14s %9s %9s", "node", "gpu", "model", "util mean", "util max", "mem max (MiB)", "power W", "power max")
		var idle []string
		dash := false
		for _, x := range r.GPUs {
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
		if len(idle) > 0 {
			t.wrap("  idle the whole run: ", strings.Join(idle, ", "))
		}
		if dash {
			t.line("  (-: a field dcgm-exporter did not send)")
		}
		t.sharingLines(r)
	}

	t.energyLines(r)

	t.absent(r, "hosts", "hosts (node_exporter)")
	if len(r.Hosts) > 0 {
		t.section("hosts (node_exporter)")
		for _, h := range r.Hosts {
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

	t.absent(r, "spans", "spans")
	s := r.Spans
	if s.Total > 0 || len(s.SpanMetrics) > 0 {
		t.section(fmt.Sprintf("spans (%d)", s.Total))
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
			}
		}
	}

	e := r.Errors
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

	hl := r.Health
	t.section("telemetry health")
	for _, d := range hl.Dirs {
		name := d.NodeName
		if d.Link != "" {
			name += " (link " + d.Link + ")"
		}
		bad := ""
		if n := d.BadLines["metrics"] + d.BadLines["traces"] + d.BadLines["logs"]; n > 0 {
			bad = fmt.Sprintf(", %d did not parse", n)
		}
		t.line("  %-14s lines: metrics %d, traces %d, logs %d%s; %d points, %d spans, %d logs",
			cut(name, 14), d.Lines["metrics"], d.Lines["traces"], d.Lines["logs"], bad, d.Points, d.Spans, d.Logs)
		for sig, msg := range d.FirstBad {
			t.line("    %s.jsonl first bad %s", sig, msg)
		}
		if d.State != nil {
			st := fmt.Sprintf("    collector %s, %d restarts", d.State.Status, d.State.Restarts)
			if d.State.ExportProblems != "" {
				st += ", export problems: " + d.State.ExportProblems
			}
			t.line("%s", st)
		}
		for _, x := range d.Targets {
			t.line("    target %s (%s): %s", x.Job, x.Instance, ScrapeSummary(x.Scrapes, x.Answered, x.WarmingUp, x.Ended))
			if x.LimitHits.Any() {
				t.line("      LIMIT: %s", x.LimitHits)
			}
		}
	}
	if hl.DroppedSeries > 0 || hl.SkippedPoints > 0 {
		t.line("  %d series over the bound not tracked, %d histogram points skipped (bounds changed)", hl.DroppedSeries, hl.SkippedPoints)
	}
	return t.err
}

type textOut struct {
	w   io.Writer
	err error
}

func (t *textOut) line(format string, a ...any) {
	if t.err != nil {
		return
	}
	s := strings.TrimRight(fmt.Sprintf(format, a...), " ")
	if len([]rune(s)) > Width {
		s = string([]rune(s)[:Width-3]) + "..."
	}
	_, t.err = fmt.Fprintln(t.w, s)
}

// wrap prints text after prefix, wrapped at word boundaries within Width,
// continuation lines indented like the prefix.
func (t *textOut) wrap(prefix, text string) {
	indent := strings.Repeat(" ", len(prefix))
	cur := prefix
	for _, word := range strings.Fields(text) {
		if len(cur)+1+len(word) > Width && strings.TrimSpace(cur) != strings.TrimSpace(prefix) {
			t.line("%s", cur)
			cur = indent
		}
		if cur != prefix && cur != indent {
			cur += " "
		}
		cur += word
	}
	t.line("%s", cur)
}

func (t *textOut) section(name string) { t.line("%s", "== "+name) }

func f(v Value, prec int) string {
	if !v.Known() {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, float64(v))
}

func pct(v Value) string {
	if !v.Known() {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(v))
}

func secs(v Value) string {
	if !v.Known() {
		return "-"
	}
	return fmt.Sprintf("%.1f s", float64(v))
}

// quant is a distribution in one line. A histogram whose observations
// fell into one bucket shows the range that holds them, not quantiles;
// an unknown min and max (a Prometheus histogram) says so.
func quant(q Quantiles, prec int) string {
	head := fmt.Sprintf("n %s  mean %s  ", f(q.Count, 0), f(q.Mean, prec))
	if q.Within != nil {
		return head + within(q, prec) + " (one bucket: no quantiles)"
	}
	s := head + fmt.Sprintf("p50 %s  p90 %s  p99 %s", f(q.P50, prec), f(q.P90, prec), f(q.P99, prec))
	if q.Min.Known() && q.Max.Known() {
		return s + fmt.Sprintf("  min %s  max %s", f(q.Min, prec), f(q.Max, prec))
	}
	if q.Max.Known() {
		return s + fmt.Sprintf("  max %s", f(q.Max, prec))
	}
	return s + "  max - (buckets only)"
}

// quantShort is p50 and p99 (or the one bucket's range) with a unit.
func quantShort(q Quantiles, prec int, unit string) string {
	if q.Within != nil {
		return within(q, prec) + " " + unit
	}
	return fmt.Sprintf("p50 %s %s  p99 %s %s", f(q.P50, prec), unit, f(q.P99, prec), unit)
}

// within is the range of a one-bucket histogram.
func within(q Quantiles, prec int) string {
	lo, hi := q.Within[0], q.Within[1]
	switch {
	case lo.Known() && hi.Known() && lo == hi:
		return "all " + f(lo, prec)
	case lo.Known() && hi.Known():
		return "all within " + f(lo, prec) + "-" + f(hi, prec)
	case hi.Known():
		return "all <= " + f(hi, prec)
	case lo.Known():
		return "all > " + f(lo, prec)
	}
	return "all in one bucket"
}

// fw is f with the reason of an unknown value.
func fw(v Value, prec int, why string) string {
	if !v.Known() {
		return "- (" + why + ")"
	}
	return f(v, prec)
}

// dur is a duration in seconds with a unit that suits it.
func dur(v Value) string {
	if !v.Known() {
		return "-"
	}
	s := float64(v)
	switch {
	case s < 10:
		return fmt.Sprintf("%.2f s", s)
	case s < 600:
		return fmt.Sprintf("%.0f s", s)
	case s < 7200:
		return fmt.Sprintf("%.1f min", s/60)
	}
	return fmt.Sprintf("%.1f h", s/3600)
}

// absent prints an empty section's title with why it is empty.
func (t *textOut) absent(r *Report, section, title string) {
	if a := r.absent(section); a != nil {
		t.wrap("== "+title+": "+a.Why+" ", "("+a.Detail+")")
	}
}

func resets(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", counters reset %d time(s)", n)
}

func counts(m map[string]float64) string {
	if len(m) == 0 {
		return "-"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %g", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func countsInt(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func cut(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "~"
}

func bytesH(v Value) string {
	if !v.Known() {
		return "-"
	}
	x := float64(v)
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for math.Abs(x) >= 1024 && i < len(units)-1 {
		x /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", x, units[i])
}
