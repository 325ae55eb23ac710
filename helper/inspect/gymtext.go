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
	byKey("sandbox exec (ms)", x.SandboxExec)
	if len(x.SandboxCreateRetries) > 0 {
		t.line("  %-24s %s", "sandbox create retries", counts(x.SandboxCreateRetries))
	}
	if len(x.SandboxActive) > 0 {
		t.line("  %-24s %s", "sandboxes held at end", counts(x.SandboxActive))
	}
	byKey("pool queue (ms)", x.PoolQueue)
	if len(x.PoolConnects) > 0 {
		t.line("  %-24s %s; queued %s", "pool connects", counts(x.PoolConnects), pct(x.PoolQueuedShare))
	}
	if x.ServersActive.Known() {
		t.line("  %-24s %s", "servers active", f(x.ServersActive, 0))
	}
	if c := x.TokenCapture; c != nil {
		byKey("token capture (ms)", c.OperationMs)
		if len(c.OperationTokens) > 0 {
			t.line("  %-24s %s", "token capture tokens", counts(c.OperationTokens))
		}
		if len(c.Outcomes) > 0 {
			t.line("  %-24s %s", "token capture outcomes", counts(c.Outcomes))
		}
		if len(c.DigestCalls) > 0 {
			t.line("  %-24s %s; bytes %s", "token capture digests", counts(c.DigestCalls), counts(c.DigestBytes))
		}
		if len(c.CacheSize) > 0 {
			t.line("  %-24s %s", "token capture caches", counts(c.CacheSize))
		}
	}
	if st := x.Startup; st != nil {
		if st.Seconds.Known() {
			t.line("  %-24s %s on %s (%d gym.startup spans)", "gym start-up", dur(st.Seconds), st.Node, st.Count)
		}
		for _, s := range st.Stages {
			t.line("  %-24s %s", "  "+s.Name, secs3(s.Seconds))
		}
		names := make([]string, 0, len(st.Servers))
		for k := range st.Servers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			t.line("  %-24s %s", "  server "+k+" ready", secs3(st.Servers[k]))
		}
		byKey("server start-up (ms)", st.ServerStages)
	}
}
