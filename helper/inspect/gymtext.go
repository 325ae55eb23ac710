package inspect

import "sort"

// gymTelemetryLines writes the lines of Gym's attributed telemetry (rollouts
// by outcome, verify duration, model calls by dialect, sandbox, queue wait,
// HTTP retries and timeouts) in the text report's gym section.
func (t *textOut) gymTelemetryLines(g Gym) {
	x := g.Telemetry
	if len(x.RolloutOutcomes) > 0 {
		t.line("  %-24s %s; success %s", "rollouts by outcome", counts(x.RolloutOutcomes), pct(x.RolloutSuccess))
	}
	if x.VerifySource != "" && x.VerifySource != mVerifyCount {
		t.line("  %-24s %s (from %s)", "verify success", pct(g.VerifySuccess), x.VerifySource)
	}
	if x.VerifyDuration.Count.Known() && x.VerifyDuration.Count > 0 {
		t.line("  %-24s %s", "verify duration (ms)", quant(x.VerifyDuration, 1))
	}
	byKey := func(title string, m map[string]Quantiles) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.line("  %-24s %s", title+" "+k, quant(m[k], 1))
		}
	}
	byKey("model call (ms)", x.ModelCalls)
	byKey("model ttfb (ms)", x.ModelTTFB)
	byKey("sandbox startup (ms)", x.SandboxStartup)
	byKey("span (ms)", x.SandboxSpans)
	byKey("queue wait (ms)", x.QueueWait)
	if len(x.HTTPRetries) > 0 {
		t.line("  %-24s %s", "http retries", counts(x.HTTPRetries))
	}
	if len(x.HTTPTimeouts) > 0 {
		t.line("  %-24s %s", "http timeouts (internal)", counts(x.HTTPTimeouts))
	}
}
