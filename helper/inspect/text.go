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
	if g.RolloutSpans.Count > 0 || g.RolloutHistogram.Count > 0 || len(g.Verify) > 0 || len(g.VerifySpans) > 0 {
		t.section("gym")
		if g.RolloutSpans.Count > 0 {
			t.line("  %-24s %s", "rollouts (spans, ms)", quant(g.RolloutSpans, 1))
		}
		if g.RolloutHistogram.Count > 0 {
			t.line("  %-24s %s", "rollouts (histogram, ms)", quant(g.RolloutHistogram, 1))
		}
		if g.RolloutsPerMinute.Known() {
			t.line("  %-24s %s", "rollouts per minute", f(g.RolloutsPerMinute, 2))
		}
		if len(g.Verify) > 0 || len(g.VerifySpans) > 0 {
			t.line("  %-24s metric %s; spans %s; success %s", "verify", counts(g.Verify), countsInt(g.VerifySpans), pct(g.VerifySuccess))
		}
		if g.VerifyLatency.Count > 0 {
			t.line("  %-24s %s", "verify latency (ms)", quant(g.VerifyLatency, 1))
		}
	}

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
			t.line("    requests %s, prompt tokens %s (%s/s), generation tokens %s (%s/s)%s",
				f(m.Requests, 0), f(m.PromptTokens, 0), f(m.PromptTokensPerSecond, 1), f(m.GenerationTokens, 0),
				f(m.GenerationTokensPerSecond, 1), resets(m.CounterResets))
			if m.E2ELatency.Count > 0 {
				t.line("    e2e latency (s)   %s", quant(m.E2ELatency, 3))
			}
			if m.TTFT.Count > 0 {
				t.line("    time to 1st token %s", quant(m.TTFT, 3))
			}
			if m.RunningMax.Known() || m.WaitingMax.Known() || m.KVCacheMax.Known() {
				t.line("    running mean %s max %s, waiting mean %s max %s, KV cache mean %s max %s",
					f(m.RunningMean, 1), f(m.RunningMax, 0), f(m.WaitingMean, 1), f(m.WaitingMax, 0), pct(m.KVCacheMean), pct(m.KVCacheMax))
			}
		}
	}

	if len(r.GPUs) > 0 {
		t.section("GPUs (dcgm-exporter)")
		t.line("  %-14s %4s %-22s %9s %8s %14s %9s %9s", "node", "gpu", "model", "util mean", "util max", "mem max (MiB)", "power W", "power max")
		var idle []string
		for _, x := range r.GPUs {
			t.line("  %-14s %4s %-22s %8s%% %7s%% %14s %9s %9s", cut(x.Node, 14), x.GPU, cut(x.Model, 22), f(x.UtilMean, 1), f(x.UtilMax, 0),
				f(x.MemoryUsedMax, 0), f(x.PowerMean, 1), f(x.PowerMax, 1))
			if x.Idle {
				idle = append(idle, x.Node+"/"+x.GPU)
			}
		}
		if len(idle) > 0 {
			t.wrap("  idle the whole run: ", strings.Join(idle, ", "))
		}
	}

	if len(r.Hosts) > 0 {
		t.section("hosts (node_exporter)")
		for _, h := range r.Hosts {
			t.line("  %-14s %d CPUs, busy %s; memory %s of %s used at most; load1 max %s", cut(h.Node, 14), h.CPUs, pct(h.CPUBusy),
				bytesH(h.MemoryUsedMax), bytesH(h.MemoryTotal), f(h.Load1Max, 2))
		}
	}

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
			t.line("  span metrics (traces.span.metrics.*, by span name):")
			for _, x := range s.SpanMetrics {
				t.line("    %-34s calls %8s  p50 %9s ms  p99 %9s ms", cut(x.Name, 34), f(x.Calls, 0), f(x.Duration.P50, 1), f(x.Duration.P99, 1))
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
			mark := ""
			if x.Answered < x.Scrapes || x.Scrapes == 0 {
				mark = fmt.Sprintf("  FAILED %d", x.Scrapes-x.Answered)
			}
			t.line("    target %s (%s): %d scrapes, %d answered%s", x.Job, x.Instance, x.Scrapes, x.Answered, mark)
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

func quant(q Quantiles, prec int) string {
	return fmt.Sprintf("n %s  mean %s  p50 %s  p90 %s  p99 %s  max %s", f(q.Count, 0), f(q.Mean, prec), f(q.P50, prec), f(q.P90, prec),
		f(q.P99, prec), f(q.Max, prec))
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
