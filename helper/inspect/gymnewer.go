package inspect

import (
	"math"
	"sort"
	"strings"
	"time"
)

// Gym's newer telemetry names (docs/inspect.md gives each with the Gym
// commit it was read at):
//
//   - Training-token capture (nemo_gym/telemetry/token_capture_metrics.py):
//     gym.token_capture.operation.duration_ms (histogram, ms) and
//     .operation.tokens_total (counter) by nemo.gym.token_capture.operation;
//     .outcome_total (observable counter) by .outcome and .reason;
//     .digest.calls_total and .digest.bytes_total (observable counters) by
//     .digest; .cache.size (observable up-down counter) by .cache.
//   - Sandbox lifecycle and the HTTP connection pool
//     (nemo_gym/telemetry/gym_metrics.py): gym.sandbox.active (up-down
//     counter), gym.sandbox.exec_duration_ms (histogram, ms),
//     gym.sandbox.create_retry_total (counter), each by
//     nemo.gym.sandbox.provider; gym.http.connection_pool.queue_duration_ms
//     (histogram, ms) and .connect_total (observable counter) by
//     nemo.gym.http.destination.server.name.
//   - gym.servers.active (gauge, the orchestrator its one writer: Lens'
//     instruments/gym.py, Gym's telemetry/metrics.py).
//   - Start-up spans (nemo_gym/telemetry/startup.py): gym.startup (the
//     supervisor, gym env start or gym eval run) with a child
//     gym.startup.<stage> per stage (load_config ... spawn_servers ...
//     wait_for_model_endpoints) and gym.startup.server per server (spawn to
//     first health answer, nemo.gym.server.name); in each server
//     gym.server.startup (gym.server.startup.worker in a Uvicorn worker)
//     with gym.server.startup.<stage> (venv_setup, interpreter_start, the
//     server's own stages, uvicorn_startup).
const (
	mTCOpMs        = "gym.token_capture.operation.duration_ms"
	mTCOpTokens    = "gym.token_capture.operation.tokens_total"
	mTCOutcome     = "gym.token_capture.outcome_total"
	mTCDigestCalls = "gym.token_capture.digest.calls_total"
	mTCDigestBytes = "gym.token_capture.digest.bytes_total"
	mTCCacheSize   = "gym.token_capture.cache.size"
	mSandboxActive = "gym.sandbox.active"
	mSandboxExecMs = "gym.sandbox.exec_duration_ms"
	mSandboxRetry  = "gym.sandbox.create_retry_total"
	mPoolQueueMs   = "gym.http.connection_pool.queue_duration_ms"
	mPoolConnects  = "gym.http.connection_pool.connect_total"
	mServersActive = "gym.servers.active"

	aTCOperation = "nemo.gym.token_capture.operation"
	aTCOutcome   = "nemo.gym.token_capture.outcome"
	aTCReason    = "nemo.gym.token_capture.reason"
	aTCDigest    = "nemo.gym.token_capture.digest"
	aTCCache     = "nemo.gym.token_capture.cache"
	aDestServer  = "nemo.gym.http.destination.server.name"
	aServerName  = "nemo.gym.server.name"

	spanStartup       = "gym.startup"
	spanStartupServer = "gym.startup.server"
	spanServerStartup = "gym.server.startup"
)

// upDownNames are the up-down counters among Gym's names: a cumulative
// sum that is not monotonic holds the current value (a gauge), not a
// total whose drops are resets.
var upDownNames = map[string]bool{mSandboxActive: true, mTCCacheSize: true}

// maxStartupSpans bounds the start-up stage and server spans kept.
const maxStartupSpans = 512

func init() {
	for _, n := range []string{mTCOpMs, mTCOpTokens, mTCOutcome, mTCDigestCalls, mTCDigestBytes, mTCCacheSize,
		mSandboxActive, mSandboxExecMs, mSandboxRetry, mPoolQueueMs, mPoolConnects, mServersActive} {
		tracked[n] = true
	}
}

// TokenCapture is what Gym's training-token capture instruments say.
type TokenCapture struct {
	// OperationMs is gym.token_capture.operation.duration_ms by
	// nemo.gym.token_capture.operation (ms).
	OperationMs map[string]Quantiles `json:"operation_ms,omitempty"`
	// OperationTokens is gym.token_capture.operation.tokens_total by
	// operation (tokens).
	OperationTokens map[string]float64 `json:"operation_tokens,omitempty"`
	// Outcomes is gym.token_capture.outcome_total by "<outcome>/<reason>".
	Outcomes map[string]float64 `json:"outcomes,omitempty"`
	// DigestCalls and DigestBytes are gym.token_capture.digest.calls_total
	// and .bytes_total (bytes) by nemo.gym.token_capture.digest.
	DigestCalls map[string]float64 `json:"digest_calls,omitempty"`
	DigestBytes map[string]float64 `json:"digest_bytes,omitempty"`
	// CacheSize is gym.token_capture.cache.size by cache: every
	// producer's last value, summed (entries).
	CacheSize map[string]float64 `json:"cache_size,omitempty"`
}

// empty reports whether no token-capture instrument was seen.
func (c *TokenCapture) empty() bool {
	return len(c.OperationMs) == 0 && len(c.OperationTokens) == 0 && len(c.Outcomes) == 0 &&
		len(c.DigestCalls) == 0 && len(c.DigestBytes) == 0 && len(c.CacheSize) == 0
}

// GymStartup is Gym's start-up as its spans tell it: the supervisor's
// gym.startup of the run (the earliest), its stages, each server's spawn
// to ready, and the servers' own stages.
type GymStartup struct {
	// Node is the node of the gym.startup span; Start and End its times;
	// Seconds its duration. Count is the gym.startup spans seen (one per
	// supervisor run).
	Node    string    `json:"node,omitempty"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Seconds Value     `json:"seconds"`
	Count   int       `json:"count"`
	// Stages are its children gym.startup.<stage>, in start order.
	Stages []StartupStage `json:"stages"`
	// Servers is each gym.startup.server child's spawn to first health
	// answer by nemo.gym.server.name (seconds).
	Servers map[string]Value `json:"servers,omitempty"`
	// ServerStages are gym.server.startup.<stage> durations over every
	// server by stage ("worker <stage>" for gym.server.startup.worker.*)
	// (ms).
	ServerStages map[string]Quantiles `json:"server_stages_ms,omitempty"`
}

// StartupStage is one stage of the supervisor's start-up.
type StartupStage struct {
	Name    string    `json:"name"`
	Start   time.Time `json:"start"`
	Seconds Value     `json:"seconds"`
}

// startupSpan is a start-up span as read.
type startupSpan struct {
	trace, id, parent, name, node string
	start, end                    int64 // unix ms
}

// startupState keeps the start-up spans while reading.
type startupState struct {
	root    *startupSpan
	roots   int
	stages  []startupSpan
	servers []startupSpan
	dropped int
}

// startupSpanSeen keeps sp if it is one of the supervisor's start-up
// spans (gym.startup, gym.startup.<stage>, gym.startup.server).
func (a *aggregator) startupSpanSeen(sp *span, node string) {
	if sp.Name != spanStartup && !strings.HasPrefix(sp.Name, spanStartup+".") {
		return
	}
	st, en := sp.Start.ms(), sp.End.ms()
	if st <= 0 || en < st {
		return
	}
	if a.startup == nil {
		a.startup = &startupState{}
	}
	s := a.startup
	rec := startupSpan{trace: sp.TraceID, id: sp.SpanID, parent: sp.ParentSpanID, node: node, start: st, end: en}
	switch {
	case sp.Name == spanStartup:
		s.roots++
		if s.root == nil || st < s.root.start {
			s.root = &rec
		}
	case len(s.stages)+len(s.servers) >= maxStartupSpans:
		s.dropped++
	case sp.Name == spanStartupServer:
		rec.name = sp.Attributes.get(aServerName)
		s.servers = append(s.servers, rec)
	default:
		rec.name = strings.TrimPrefix(sp.Name, spanStartup+".")
		s.stages = append(s.stages, rec)
	}
}

// gymStartup is the report's start-up, nil without a gym.startup span and
// without server stage spans.
func (a *aggregator) gymStartup() *GymStartup {
	stages := map[string][]*spanStat{}
	for k, st := range a.spans {
		if rest, ok := strings.CutPrefix(k[0], spanServerStartup+".worker."); ok {
			stages["worker "+rest] = append(stages["worker "+rest], st)
		} else if rest, ok := strings.CutPrefix(k[0], spanServerStartup+"."); ok && rest != "worker" {
			stages[rest] = append(stages[rest], st)
		}
	}
	s := a.startup
	if (s == nil || s.root == nil) && len(stages) == 0 {
		return nil
	}
	g := &GymStartup{Stages: []StartupStage{}, Seconds: Value(math.NaN())}
	if len(stages) > 0 {
		g.ServerStages = map[string]Quantiles{}
		for name, sts := range stages {
			g.ServerStages[name] = spanQuantiles(sts)
		}
	}
	if s == nil || s.root == nil {
		return g
	}
	r := s.root
	g.Node, g.Count = r.node, s.roots
	g.Start, g.End = unixMs(r.start), unixMs(r.end)
	g.Seconds = Value(float64(r.end-r.start) / 1000)
	child := func(x startupSpan) bool { return x.trace == r.trace && x.parent == r.id }
	for _, x := range s.stages {
		if child(x) {
			g.Stages = append(g.Stages, StartupStage{Name: x.name, Start: unixMs(x.start), Seconds: Value(float64(x.end-x.start) / 1000)})
		}
	}
	sort.SliceStable(g.Stages, func(i, j int) bool { return g.Stages[i].Start.Before(g.Stages[j].Start) })
	for _, x := range s.servers {
		if child(x) {
			if g.Servers == nil {
				g.Servers = map[string]Value{}
			}
			g.Servers[orNone(x.name)] = Value(float64(x.end-x.start) / 1000)
		}
	}
	return g
}

// lastByLabel sums, by the value of label, every series' last value of a
// gauge (or of an up-down counter, kept as a gauge).
func (a *aggregator) lastByLabel(metric, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range a.byMetric(metric) {
		if s.g != nil && s.g.n > 0 {
			out[orNone(s.labels[label])] += s.g.last
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// countBy2 sums the counters of one metric by "<label1>/<label2>".
func (a *aggregator) countBy2(metric, l1, l2 string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range a.byMetric(metric) {
		if s.c != nil {
			out[orNone(s.labels[l1])+"/"+orNone(s.labels[l2])] += s.c.total()
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// gymNewer fills t's fields of Gym's newer names.
func (a *aggregator) gymNewer(t *GymTelemetry) {
	tc := &TokenCapture{
		OperationMs:     nilIfEmpty(a.histByLabel(mTCOpMs, aTCOperation)),
		OperationTokens: a.countByLabel(mTCOpTokens, aTCOperation),
		Outcomes:        a.countBy2(mTCOutcome, aTCOutcome, aTCReason),
		DigestCalls:     a.countByLabel(mTCDigestCalls, aTCDigest),
		DigestBytes:     a.countByLabel(mTCDigestBytes, aTCDigest),
		CacheSize:       a.lastByLabel(mTCCacheSize, aTCCache),
	}
	if !tc.empty() {
		t.TokenCapture = tc
	}
	t.SandboxExec = nilIfEmpty(a.histByLabel(mSandboxExecMs, aProvider))
	t.SandboxCreateRetries = a.countByLabel(mSandboxRetry, aProvider)
	t.SandboxActive = a.lastByLabel(mSandboxActive, aProvider)
	t.PoolQueue = nilIfEmpty(a.histByLabel(mPoolQueueMs, aDestServer))
	t.PoolConnects = a.countByLabel(mPoolConnects, aDestServer)
	if len(t.PoolConnects) > 0 {
		queued, all := 0.0, 0.0
		for k, n := range t.PoolConnects {
			all += n
			if q, ok := t.PoolQueue[k]; ok && q.Count.Known() {
				queued += float64(q.Count)
			}
		}
		if all > 0 {
			t.PoolQueuedShare = Value(queued / all)
		}
	}
	// One writer (the orchestrator): the latest point of any producer.
	var lastMs int64
	for _, s := range a.byMetric(mServersActive) {
		if s.g != nil && s.g.n > 0 && s.g.lastMs >= lastMs {
			lastMs, t.ServersActive = s.g.lastMs, Value(s.g.last)
		}
	}
}

// startupParts splits "batch script to first rollout" by Gym's start-up:
// the batch script's start to gym.startup's, each of its stages, and its
// end to the first rollout; each part's Within names the part it splits.
// None without a gym.startup span.
func startupParts(fr FirstRollout, g *GymStartup) []TimePart {
	if g == nil || g.Start.IsZero() {
		return nil
	}
	const within = "batch script to first rollout"
	secs := func(from, to *time.Time) Value {
		if from == nil || to == nil {
			return Value(math.NaN())
		}
		return Value(to.Sub(*from).Seconds())
	}
	start, end := g.Start, g.End
	parts := []TimePart{{Name: "batch script to Gym start-up", Seconds: secs(fr.BatchStart, &start), Within: within}}
	for _, s := range g.Stages {
		parts = append(parts, TimePart{Name: "Gym start-up: " + s.Name, Seconds: s.Seconds, Within: within})
	}
	if len(g.Stages) == 0 {
		parts = append(parts, TimePart{Name: "Gym start-up", Seconds: g.Seconds, Within: within})
	}
	parts = append(parts, TimePart{Name: "Gym start-up to first rollout", Seconds: secs(&end, fr.FirstRollout), Within: within})
	return parts
}
