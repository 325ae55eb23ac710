package inspect

import (
	"math"
	"sort"
)

// NeMo Gym's own telemetry names, as Gym emits them through nemo-lens
// (docs/inspect.md lists each with its source file):
//
//   - Lens' five gym.* instruments (NVIDIA-NeMo/Lens
//     src/nemo/lens/instruments/gym.py; Gym's nemo_gym/telemetry/metrics.py
//     records them without attributes): gym.rollout.duration_ms,
//     gym.verify.duration_ms, gym.verify.success_rate (a gauge: each
//     process's cumulative fraction of verifications that completed).
//   - Gym's attributed instruments (nemo_gym/telemetry/gym_metrics.py):
//     rollouts by outcome, model-call latency and time to first byte by
//     dialect, sandbox start-up, concurrency queue wait, HTTP retries and
//     timeouts.
//   - Gym's span names (nemo_gym/telemetry/endpoints.py, sandbox/api.py):
//     gym.rollout, gym.verify (status Error when the verifier raised),
//     gym.sandbox.start, gym.sandbox.exec.
//
// The older names this project's stand-in emitted (gym.verify.count with
// result, nemo.gym.verify.result on gym.verify spans, sandbox.exec) are
// still read.
const (
	mVerifyMs       = "gym.verify.duration_ms"
	mVerifyRate     = "gym.verify.success_rate"
	mRolloutDone    = "gym.rollout.completed_total"
	mModelCallMs    = "gym.model.call_duration_ms"
	mModelTTFBMs    = "gym.model.time_to_first_byte_ms"
	mSandboxStartMs = "gym.sandbox.startup_duration_ms"
	mQueueWaitMs    = "gym.concurrency.queue_wait_duration_ms"
	mHTTPRetry      = "gym.http.retry_total"
	mHTTPTimeout    = "gym.http.timeout_total"

	aOutcome     = "nemo.gym.rollout.outcome"
	aDialect     = "nemo.gym.model.dialect"
	aProvider    = "nemo.gym.sandbox.provider"
	aSite        = "nemo.gym.concurrency.site"
	aRetryReason = "nemo.gym.http.retry_reason"
	aInternal    = "nemo.gym.http.internal"
	aVerifyRes   = "nemo.gym.verify.result"
)

// sandboxSpanNames are Gym's sandbox span names, and the older one.
var sandboxSpanNames = []string{"gym.sandbox.start", "gym.sandbox.exec", "sandbox.exec"}

// successOutcomes are the values of nemo.gym.rollout.outcome that count as
// a rollout that succeeded, in both vocabularies Gym has used
// (success/failure; scored/dropped, with failed and omitted).
var successOutcomes = map[string]bool{"success": true, "scored": true}

func init() {
	for _, n := range []string{mVerifyMs, mVerifyRate, mRolloutDone, mModelCallMs, mModelTTFBMs,
		mSandboxStartMs, mQueueWaitMs, mHTTPRetry, mHTTPTimeout} {
		tracked[n] = true
	}
}

// GymTelemetry is what Gym's attributed instruments and sandbox spans say.
type GymTelemetry struct {
	// RolloutOutcomes counts gym.rollout.completed_total by
	// nemo.gym.rollout.outcome; RolloutSuccess is the share of success or
	// scored among them, null without the counter.
	RolloutOutcomes map[string]float64 `json:"rollout_outcomes,omitempty"`
	RolloutSuccess  Value              `json:"rollout_success"`
	// VerifyDuration is gym.verify.duration_ms over the run (ms).
	VerifyDuration Quantiles `json:"verify_duration_ms"`
	// VerifySource names what VerifySuccess was computed from:
	// gym.verify.count, gym.verify.success_rate, gym.verify spans, or "".
	VerifySource string `json:"verify_source,omitempty"`
	// ModelCalls and ModelTTFB are gym.model.call_duration_ms and
	// gym.model.time_to_first_byte_ms by nemo.gym.model.dialect (ms).
	ModelCalls map[string]Quantiles `json:"model_calls_ms,omitempty"`
	ModelTTFB  map[string]Quantiles `json:"model_ttfb_ms,omitempty"`
	// SandboxStartup is gym.sandbox.startup_duration_ms by
	// nemo.gym.sandbox.provider (ms); SandboxSpans are the durations of
	// the sandbox spans by name (ms).
	SandboxStartup map[string]Quantiles `json:"sandbox_startup_ms,omitempty"`
	SandboxSpans   map[string]Quantiles `json:"sandbox_spans_ms,omitempty"`
	// QueueWait is gym.concurrency.queue_wait_duration_ms by
	// nemo.gym.concurrency.site (ms).
	QueueWait map[string]Quantiles `json:"queue_wait_ms,omitempty"`
	// HTTPRetries counts gym.http.retry_total by nemo.gym.http.retry_reason;
	// HTTPTimeouts gym.http.timeout_total by nemo.gym.http.internal.
	HTTPRetries  map[string]float64 `json:"http_retries,omitempty"`
	HTTPTimeouts map[string]float64 `json:"http_timeouts,omitempty"`

	// The newer names (gymnewer.go). TokenCapture is nil without any
	// gym.token_capture.* instrument.
	TokenCapture *TokenCapture `json:"token_capture,omitempty"`
	// SandboxExec is gym.sandbox.exec_duration_ms by provider (ms);
	// SandboxCreateRetries gym.sandbox.create_retry_total by provider;
	// SandboxActive gym.sandbox.active by provider: every producer's last
	// value, summed (sandboxes held at the end).
	SandboxExec          map[string]Quantiles `json:"sandbox_exec_ms,omitempty"`
	SandboxCreateRetries map[string]float64   `json:"sandbox_create_retries,omitempty"`
	SandboxActive        map[string]float64   `json:"sandbox_active,omitempty"`
	// PoolQueue is gym.http.connection_pool.queue_duration_ms by
	// nemo.gym.http.destination.server.name (ms); PoolConnects
	// gym.http.connection_pool.connect_total by the same; PoolQueuedShare
	// the queued acquisitions over the connection attempts (null without
	// connects).
	PoolQueue       map[string]Quantiles `json:"connection_pool_queue_ms,omitempty"`
	PoolConnects    map[string]float64   `json:"connection_pool_connects,omitempty"`
	PoolQueuedShare Value                `json:"connection_pool_queued_share"`
	// ServersActive is gym.servers.active's latest value (servers); null
	// without it.
	ServersActive Value `json:"servers_active"`
	// Startup is Gym's start-up from its spans; nil without them.
	Startup *GymStartup `json:"startup,omitempty"`
}

// Empty reports whether nothing of Gym's attributed telemetry was seen.
func (t GymTelemetry) Empty() bool {
	return len(t.RolloutOutcomes) == 0 && !t.VerifyDuration.Count.Known() && len(t.ModelCalls) == 0 &&
		len(t.ModelTTFB) == 0 && len(t.SandboxStartup) == 0 && len(t.SandboxSpans) == 0 &&
		len(t.QueueWait) == 0 && len(t.HTTPRetries) == 0 && len(t.HTTPTimeouts) == 0 &&
		t.TokenCapture == nil && len(t.SandboxExec) == 0 && len(t.SandboxCreateRetries) == 0 &&
		len(t.SandboxActive) == 0 && len(t.PoolQueue) == 0 && len(t.PoolConnects) == 0 &&
		!t.ServersActive.Known() && t.Startup == nil
}

// verifyResult is a gym.verify span's result: its nemo.gym.verify.result
// (older Gym versions and the stand-in), else "error" for a span with
// status Error (Gym's verifier raised) and "ok" otherwise.
func verifyResult(sp *span) string {
	if r := sp.Attributes.get(aVerifyRes); r != "" {
		return r
	}
	if sp.Status.Code == statusError {
		return "error"
	}
	return "ok"
}

// histByLabel merges the histograms of one metric by the value of label
// ("" for all) into quantiles.
func (a *aggregator) histByLabel(metric, label string) map[string]Quantiles {
	type acc struct {
		sets [][]Bucket
		sum  histSummary
	}
	by := map[string]*acc{}
	for _, s := range a.byMetric(metric) {
		if s.h == nil {
			continue
		}
		k := s.labels[label]
		if label == "" {
			k = ""
		} else if k == "" {
			k = "(none)"
		}
		x := by[k]
		if x == nil {
			x = &acc{}
			by[k] = x
		}
		x.sets = append(x.sets, s.h.cumulative())
		x.sum.add(s.h)
	}
	out := map[string]Quantiles{}
	for k, x := range by {
		out[k] = histQuantiles(mergeBuckets(x.sets...), x.sum)
	}
	return out
}

// countByLabel sums the counters of one metric by the value of label.
func (a *aggregator) countByLabel(metric, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range a.byMetric(metric) {
		if s.c != nil {
			out[orNone(s.labels[label])] += s.c.total()
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func nilIfEmpty(m map[string]Quantiles) map[string]Quantiles {
	if len(m) == 0 {
		return nil
	}
	return m
}

// gymTelemetry fills g.Telemetry from Gym's real names and settles
// g.VerifySuccess: from gym.verify.count when present (older names), else
// from gym.verify.success_rate (each process's last fraction weighted by
// that process's gym.verify.duration_ms count, or their mean without
// one), else from the gym.verify spans (pass or ok over all).
func (a *aggregator) gymTelemetry(g *Gym) {
	t := GymTelemetry{RolloutSuccess: Value(math.NaN()), VerifyDuration: unknownQ(),
		PoolQueuedShare: Value(math.NaN()), ServersActive: Value(math.NaN())}
	a.gymNewer(&t)
	t.Startup = a.gymStartup()
	t.RolloutOutcomes = a.countByLabel(mRolloutDone, aOutcome)
	if len(t.RolloutOutcomes) > 0 {
		ok, all := 0.0, 0.0
		for o, n := range t.RolloutOutcomes {
			all += n
			if successOutcomes[o] {
				ok += n
			}
		}
		if all > 0 {
			t.RolloutSuccess = Value(ok / all)
		}
	}
	if v := a.histByLabel(mVerifyMs, ""); len(v) > 0 {
		t.VerifyDuration = v[""]
	}
	t.ModelCalls = nilIfEmpty(a.histByLabel(mModelCallMs, aDialect))
	t.ModelTTFB = nilIfEmpty(a.histByLabel(mModelTTFBMs, aDialect))
	t.SandboxStartup = nilIfEmpty(a.histByLabel(mSandboxStartMs, aProvider))
	t.QueueWait = nilIfEmpty(a.histByLabel(mQueueWaitMs, aSite))
	t.HTTPRetries = a.countByLabel(mHTTPRetry, aRetryReason)
	t.HTTPTimeouts = a.countByLabel(mHTTPTimeout, aInternal)
	spans := map[string]Quantiles{}
	for _, name := range sandboxSpanNames {
		var sts []*spanStat
		for k, st := range a.spans {
			if k[0] == name {
				sts = append(sts, st)
			}
		}
		if len(sts) > 0 {
			spans[name] = spanQuantiles(sts)
		}
	}
	t.SandboxSpans = nilIfEmpty(spans)

	switch {
	case len(g.Verify) > 0:
		t.VerifySource = mVerifyCount
	case len(a.byMetric(mVerifyRate)) > 0:
		t.VerifySource = mVerifyRate
		g.VerifySuccess = Value(a.verifyRate())
	case len(g.VerifySpans) > 0:
		t.VerifySource = spanVerify + " spans"
		ok, all := 0, 0
		for r, n := range g.VerifySpans {
			all += n
			if r == "pass" || r == "ok" {
				ok += n
			}
		}
		g.VerifySuccess = Value(float64(ok) / float64(all))
	}
	g.Telemetry = t
}

// verifyRate is the run's verify success from gym.verify.success_rate:
// every producer's last value, weighted by the count of its
// gym.verify.duration_ms (the verifications it made), or the plain mean of
// the last values when no producer has that histogram.
func (a *aggregator) verifyRate() float64 {
	counts := map[[3]string]float64{}
	for _, s := range a.byMetric(mVerifyMs) {
		if s.h != nil {
			counts[[3]string{s.key.node, s.key.producer, s.key.instance}] += s.h.count
		}
	}
	var keys [][3]string
	lasts := map[[3]string]float64{}
	for _, s := range a.byMetric(mVerifyRate) {
		if s.g == nil || s.g.n == 0 {
			continue
		}
		k := [3]string{s.key.node, s.key.producer, s.key.instance}
		if _, ok := lasts[k]; !ok {
			keys = append(keys, k)
		}
		lasts[k] = s.g.last
	}
	if len(keys) == 0 {
		return math.NaN()
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1]+keys[i][2] < keys[j][0]+keys[j][1]+keys[j][2] })
	num, den, sum := 0.0, 0.0, 0.0
	for _, k := range keys {
		sum += lasts[k]
		if c := counts[k]; c > 0 {
			num += lasts[k] * c
			den += c
		}
	}
	if den > 0 {
		return num / den
	}
	return sum / float64(len(keys))
}
