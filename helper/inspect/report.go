package inspect

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// ReportVersion is the version of the Report schema (docs/inspect.md).
const ReportVersion = 1

// Value is a figure of the report; NaN (no data) is null in JSON.
type Value float64

// MarshalJSON writes null for NaN and infinities.
func (v Value) MarshalJSON() ([]byte, error) {
	f := float64(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return []byte(strconv.FormatFloat(f, 'g', -1, 64)), nil
}

// UnmarshalJSON reads null as NaN.
func (v *Value) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*v = Value(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	*v = Value(f)
	return err
}

// Known reports whether v has data.
func (v Value) Known() bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// Point is one point of a time series: [unix milliseconds, value].
type Point [2]float64

// Report is what `inspect` says about a job: the schema of `inspect --json`
// (version ReportVersion), also the data the terminal and HTML renderers
// draw. Times are RFC 3339 UTC, durations in the unit their name ends in,
// time series [unix ms, value] points thinned to at most 240 per series.
type Report struct {
	Version int `json:"version"`
	// Dir is the job's otel/ dir.
	Dir string `json:"dir"`
	// Receipts are the drain receipts of the node dirs (otel/receipt.json),
	// Trouble the lines that say the backend refused or lost data or that
	// a receipt is missing or incomplete: the report's first lines.
	Receipts []NodeReceipt `json:"receipts"`
	Trouble  []string      `json:"trouble"`
	Job      Job           `json:"job"`
	Gym      Gym           `json:"gym"`
	// ModelServers has one entry per vLLM server (node, scrape job,
	// model_name), then one with Node "(all)" over all of them.
	ModelServers []ModelServer `json:"model_servers"`
	// Routers has one entry per vllm-router (the router of a Gym vllm_pd
	// service): the requests it routed and what each worker got.
	Routers []Router `json:"routers,omitempty"`
	GPUs    []GPU    `json:"gpus"`
	// GPUSharing lists the GPUs (and MIG instances) of the files that are
	// not the job's alone, each with why (energy.go).
	GPUSharing []string `json:"gpu_sharing"`
	// Energy is the job's GPUs' energy, per generated token and per
	// rollout (energy.go).
	Energy Energy `json:"energy"`
	Hosts  []Host `json:"hosts"`
	Spans  Spans  `json:"spans"`
	Errors Errors `json:"errors"`
	Health Health `json:"health"`
	// Absent are the sections without data, each with why.
	Absent []Absence `json:"absent"`
	// Summary is how the run went, in a few figures.
	Summary RunSummary `json:"summary"`
}

// NodeReceipt is one node dir's receipt, or why it has none.
type NodeReceipt struct {
	Dir string `json:"dir"`
	// Receipt is the receipt as written (nil when none could be read).
	Receipt *receipt.Receipt `json:"receipt,omitempty"`
	// Summary is the receipt's own summary lines (helper/receipt).
	Summary []string `json:"summary,omitempty"`
	// Missing says why there is no receipt.
	Missing string `json:"missing,omitempty"`
}

// Job is the run's identity and time span.
type Job struct {
	// Identity holds the resource attributes user, run_id, slurm_job_id,
	// slurm_job_restart_count, slurm_job_sluid, benchmark, cluster, model,
	// service.name and host.name seen (an Int value ends in " (int)").
	Identity map[string][]string `json:"identity"`
	// Start and End are the first and last timestamp of any item.
	Start           time.Time `json:"start"`
	End             time.Time `json:"end"`
	DurationSeconds Value     `json:"duration_seconds"`
	// Nodes are the nodes that wrote files, in source order.
	Nodes []string `json:"nodes"`
	// Producers counts items by service.name.override.
	Producers map[string]int `json:"producers"`
	// MetricNames counts data points by metric name.
	MetricNames map[string]int `json:"metric_names"`
}

// Quantiles are the figures of a distribution. From a histogram, P50, P90
// and P99 are Prometheus' histogram_quantile over the run's buckets,
// clamped into [Min, Max] where those are known; from raw samples, its
// quantile_over_time of the samples.
type Quantiles struct {
	Count Value `json:"count"`
	Mean  Value `json:"mean"`
	P50   Value `json:"p50"`
	P90   Value `json:"p90"`
	P99   Value `json:"p99"`
	// Min and Max are the smallest and largest observation when they are
	// known (raw samples, or an OTLP histogram with min and max;
	// Prometheus histograms have neither).
	Min Value `json:"min"`
	Max Value `json:"max"`
	// Within is set for a histogram whose observations all fell into one
	// bucket: [low, high], the interval that holds them all ([Min, Max]
	// where known, else the bucket's bounds; null for an open end). P50,
	// P90 and P99 are null then: inside one bucket they would be made up.
	Within []Value `json:"within,omitempty"`
}

func unknownQ() Quantiles {
	n := Value(math.NaN())
	return Quantiles{Count: 0, Mean: n, P50: n, P90: n, P99: n, Min: n, Max: n}
}

func sampleQuantiles(vs []float64, count int, total, min, max float64) Quantiles {
	q := unknownQ()
	q.Count = Value(count)
	if count > 0 {
		q.Mean = Value(total / float64(count))
		q.Min, q.Max = Value(min), Value(max)
	}
	cp := append([]float64(nil), vs...)
	q.P50 = Value(SampleQuantile(0.5, cp))
	q.P90 = Value(SampleQuantile(0.9, cp))
	q.P99 = Value(SampleQuantile(0.99, cp))
	return q
}

// HistogramBuckets are a histogram's observations per bucket over the run,
// for a chart: Counts[i] observations in (Bounds[i-1], Bounds[i]], the last
// count above the last bound.
type HistogramBuckets struct {
	Bounds []float64 `json:"bounds"`
	Counts []float64 `json:"counts"`
}

// Gym is what NeMo Gym's telemetry says about rollouts and verification.
type Gym struct {
	// RolloutSpans are the durations (ms) of gym.rollout spans.
	RolloutSpans Quantiles `json:"rollout_spans_ms"`
	// RolloutHistogram is gym.rollout.duration_ms over the run (ms).
	RolloutHistogram Quantiles `json:"rollout_histogram_ms"`
	// RolloutsPerMinute is the rollout spans' count over the time from the
	// first one's start to the last one's end (without spans: the
	// histogram's count over the run's time span): RolloutsCounted over
	// RolloutsWindowSeconds.
	RolloutsPerMinute     Value `json:"rollouts_per_minute"`
	RolloutsCounted       Value `json:"rollouts_counted"`
	RolloutsWindowSeconds Value `json:"rollouts_window_seconds"`
	// RolloutRate is rollouts per second over time, per node.
	RolloutRate map[string][]Point `json:"rollout_rate"`
	// RolloutsOverTime is the rollouts completed so far (the
	// gym.rollout.duration_ms histogram's count) over time, per node and
	// producer ("<node> <producer>").
	RolloutsOverTime map[string][]Point `json:"rollouts_over_time"`
	// Verify counts gym.verify.count by its result attribute; VerifySpans
	// counts gym.verify spans by nemo.gym.verify.result, else by status
	// ("ok", or "error" when the verifier raised).
	Verify      map[string]float64 `json:"verify"`
	VerifySpans map[string]int     `json:"verify_spans"`
	// VerifySuccess is pass / all of Verify; without it Gym's
	// gym.verify.success_rate, else pass or ok / all of VerifySpans
	// (Telemetry.VerifySource says which); null when there was no verify.
	VerifySuccess Value `json:"verify_success"`
	// VerifyLatency are the durations (ms) of gym.verify spans.
	VerifyLatency Quantiles `json:"verify_latency_ms"`
	// Telemetry is what Gym's attributed instruments and sandbox spans
	// say (gymnames.go).
	Telemetry GymTelemetry `json:"telemetry"`
}

// ModelServer is one vLLM server's figures over the run.
type ModelServer struct {
	Node     string `json:"node"`
	Producer string `json:"producer"`
	Model    string `json:"model"`
	// Requests is vllm:request_success_total, or the e2e histogram's count
	// when the server has no such counter.
	Requests         Value `json:"requests"`
	PromptTokens     Value `json:"prompt_tokens"`
	GenerationTokens Value `json:"generation_tokens"`
	// PromptTokensPerSecond and GenerationTokensPerSecond are the
	// counters' increase between their first and last point over that
	// time, RateWindowSeconds (the longest of the servers' for "(all)",
	// whose rates are the sum of theirs); null with one scrape.
	PromptTokensPerSecond     Value `json:"prompt_tokens_per_second"`
	GenerationTokensPerSecond Value `json:"generation_tokens_per_second"`
	RateWindowSeconds         Value `json:"rate_window_seconds"`
	// CounterResets is the most resets seen in one of the token counters
	// (each a restarted server).
	CounterResets int `json:"counter_resets"`
	// E2ELatency, TTFT and InterToken are in seconds, from vLLM's
	// histograms; InterToken is vllm:inter_token_latency_seconds, or the
	// older vllm:time_per_output_token_seconds (vllmnames.go).
	E2ELatency       Quantiles        `json:"e2e_latency_seconds"`
	E2EBuckets       HistogramBuckets `json:"e2e_buckets"`
	TTFT             Quantiles        `json:"ttft_seconds"`
	TTFTBuckets      HistogramBuckets `json:"ttft_buckets"`
	InterToken       Quantiles        `json:"inter_token_latency_seconds"`
	RunningMean      Value            `json:"running_mean"`
	RunningMax       Value            `json:"running_max"`
	WaitingMean      Value            `json:"waiting_mean"`
	WaitingMax       Value            `json:"waiting_max"`
	KVCacheMean      Value            `json:"kv_cache_mean"`
	KVCacheMax       Value            `json:"kv_cache_max"`
	GenerationPerSec []Point          `json:"generation_tokens_per_second_over_time,omitempty"`
	RunningOverTime  []Point          `json:"running_over_time,omitempty"`
	WaitingOverTime  []Point          `json:"waiting_over_time,omitempty"`
	KVCacheOverTime  []Point          `json:"kv_cache_over_time,omitempty"`
}

// GPU is one GPU's figures from dcgm-exporter over the run, or one MIG
// instance's (Instance set).
type GPU struct {
	Node  string `json:"node"`
	GPU   string `json:"gpu"`
	Model string `json:"model"`
	// Instance and Profile are dcgm-exporter's GPU_I_ID and GPU_I_PROFILE
	// of a MIG instance ("" for a whole GPU).
	Instance string `json:"gpu_instance,omitempty"`
	Profile  string `json:"gpu_instance_profile,omitempty"`
	// Attribution is the collector's gpu_attribution: "job", "mig",
	// "shared", "unnamed", or "" in files that have none.
	Attribution string `json:"attribution,omitempty"`
	// UtilMean and UtilMax are DCGM_FI_DEV_GPU_UTIL (%).
	UtilMean Value `json:"util_mean_percent"`
	UtilMax  Value `json:"util_max_percent"`
	// MemoryUsedMax is DCGM_FI_DEV_FB_USED's maximum (MiB); MemoryTotal
	// FB_USED + FB_FREE at that time when FB_FREE is there.
	MemoryUsedMax Value `json:"memory_used_max_mib"`
	MemoryTotal   Value `json:"memory_total_mib"`
	PowerMean     Value `json:"power_mean_watts"`
	PowerMax      Value `json:"power_max_watts"`
	// Idle is true when the GPU's utilisation was 0 at every scrape.
	Idle         bool    `json:"idle"`
	UtilOverTime []Point `json:"util_over_time,omitempty"`
}

// Host is one node's CPU and memory from node_exporter over the run.
type Host struct {
	Node string `json:"node"`
	CPUs int    `json:"cpus"`
	// CPUBusy is the fraction of CPU time not idle over the run (from
	// node_cpu_seconds_total's increase), 0..1.
	CPUBusy Value `json:"cpu_busy"`
	// MemoryTotal and MemoryUsedMax are bytes (MemTotal, and MemTotal
	// minus the lowest MemAvailable).
	MemoryTotal   Value   `json:"memory_total_bytes"`
	MemoryUsedMax Value   `json:"memory_used_max_bytes"`
	Load1Max      Value   `json:"load1_max"`
	Load1OverTime []Point `json:"load1_over_time,omitempty"`
}

// Spans are the span statistics.
type Spans struct {
	Total int `json:"total"`
	// ByName are the raw spans' statistics by name and producer, sorted by
	// total time; ByP99 the same sorted by p99.
	ByName []SpanName `json:"by_name"`
	ByP99  []SpanName `json:"by_p99"`
	// Slowest are the slowest single spans.
	Slowest []SlowSpan `json:"slowest"`
	// SpanMetrics are the span_metrics connector's figures by span name
	// (calls, and the duration histogram's quantiles in ms).
	SpanMetrics []SpanMetric `json:"span_metrics"`
}

// SpanName is the spans of one name and producer (durations in ms).
type SpanName struct {
	Name     string    `json:"name"`
	Producer string    `json:"producer"`
	TotalMs  float64   `json:"total_ms"`
	Errors   int       `json:"errors"`
	Duration Quantiles `json:"duration_ms"`
}

// SlowSpan is one span among the slowest.
type SlowSpan struct {
	Name       string    `json:"name"`
	Producer   string    `json:"producer"`
	Node       string    `json:"node"`
	TraceID    string    `json:"trace_id"`
	SpanID     string    `json:"span_id"`
	DurationMs float64   `json:"duration_ms"`
	Start      time.Time `json:"start"`
	Error      bool      `json:"error"`
}

// SpanMetric is the span_metrics connector's series of one span name.
type SpanMetric struct {
	Name  string `json:"name"`
	Calls Value  `json:"calls"`
	// Duration is from the raw spans of that name where traces.jsonl has
	// them (DurationFrom "spans", Spans of them), else from the
	// connector's duration histogram (DurationFrom "histogram").
	Duration     Quantiles `json:"duration_ms"`
	DurationFrom string    `json:"duration_from"`
	Spans        int       `json:"spans"`
}

// Errors are the error spans and error log records.
type Errors struct {
	Spans          int            `json:"spans"`
	SpanExamples   []ErrorSpan    `json:"span_examples"`
	Logs           int            `json:"logs"`
	LogExamples    []ErrorLog     `json:"log_examples"`
	LogsBySeverity map[string]int `json:"logs_by_severity"`
}

// ErrorSpan is a span with status ERROR.
type ErrorSpan struct {
	Name     string    `json:"name"`
	Producer string    `json:"producer"`
	Node     string    `json:"node"`
	TraceID  string    `json:"trace_id"`
	SpanID   string    `json:"span_id"`
	Message  string    `json:"message"`
	Start    time.Time `json:"start"`
}

// ErrorLog is a log record of severity ERROR or above.
type ErrorLog struct {
	Time     time.Time `json:"time"`
	Node     string    `json:"node"`
	Producer string    `json:"producer"`
	Severity string    `json:"severity"`
	Body     string    `json:"body"`
	TraceID  string    `json:"trace_id,omitempty"`
	SpanID   string    `json:"span_id,omitempty"`
}

// Health is the telemetry's own health.
type Health struct {
	Dirs []DirHealth `json:"dirs"`
	// FailedTargets are the scrape targets with failed scrapes (up = 0).
	FailedTargets []TargetHealth `json:"failed_targets"`
	// BadLines counts the lines that did not parse, over all files.
	BadLines int `json:"bad_lines"`
	// DroppedSeries counts series not tracked (over the bound of 20000);
	// SkippedPoints histogram points whose bounds changed.
	DroppedSeries int `json:"dropped_series"`
	SkippedPoints int `json:"skipped_points"`
}

// DirHealth is one node dir: its files and its collector's state.json.
type DirHealth struct {
	Source
	// NodeName is the node the dir's data came from.
	NodeName string `json:"node_name"`
	// Lines and BadLines count each file's lines and those that did not
	// parse (the last line of a file still being written may be partial);
	// FirstBad is each file's first parse error.
	Lines    map[string]int    `json:"lines"`
	BadLines map[string]int    `json:"bad_lines"`
	FirstBad map[string]string `json:"first_bad,omitempty"`
	Points   int               `json:"data_points"`
	Spans    int               `json:"spans"`
	Logs     int               `json:"log_records"`
	// Targets are the scrape targets of its collector.yaml.
	Targets []TargetHealth `json:"targets"`
	// State is the collector's state.json (status, restarts, export
	// problems) when there is one.
	State *DirState `json:"state,omitempty"`
}

// DirState is what the report shows of state.json (jobdir.State).
type DirState struct {
	Status         string `json:"status"`
	Error          string `json:"error,omitempty"`
	Restarts       int    `json:"restarts"`
	ExportProblems string `json:"export_problems,omitempty"`
}

// TargetHealth is one scrape target and its scrapes.
type TargetHealth struct {
	Dir      string `json:"dir"`
	Job      string `json:"job"`
	Instance string `json:"instance"`
	Scrapes  int    `json:"scrapes"`
	Answered int    `json:"answered"`
	// WarmingUp and Ended count the failed scrapes before the target's
	// first answer and after its last (see Target): not trouble.
	WarmingUp int `json:"warming_up"`
	Ended     int `json:"ended"`
	// Limits says which scrape limits the target hit (fields omitted when
	// none).
	LimitHits
}

// Failed is the number of troubled scrapes: failed between the first and
// the last answer, or all of them when the target never answered.
func (t TargetHealth) Failed() int {
	return Target{Scrapes: t.Scrapes, Answered: t.Answered, WarmingUp: t.WarmingUp, Ended: t.Ended}.Failed()
}

func unixMs(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Build reads every node dir of the job whose otel/ dir (or job dir) is
// dir, streaming, and returns its report. A node dir without any jsonl file
// is an error naming it; lines that do not parse are counted, not fatal.
func Build(dir string) (*Report, error) {
	srcs := Sources(dir)
	a := newAggregator()
	for _, src := range srcs {
		d := &dirStat{src: src, lines: map[string]int{}, bad: map[string]int{}, firstBad: map[string]string{}, up: map[[2]string]*scrapeLog{}}
		a.dirs = append(a.dirs, d)
		a.cur = d
		found := 0
		for _, sig := range signals {
			path := filepath.Join(src.Dir, jobdir.SignalFile(sig))
			err := readFile(path, func(dl decoded) {
				d.lines[sig]++
				if dl.err != nil {
					d.bad[sig]++
					if d.firstBad[sig] == "" {
						d.firstBad[sig] = fmt.Sprintf("line %d: %v", d.lines[sig], dl.err)
					}
					return
				}
				a.metrics(dl.line)
				a.traces(dl.line)
				a.logs(dl.line)
			})
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			found++
		}
		if found == 0 {
			return nil, fmt.Errorf("%s: no metrics.jsonl, traces.jsonl or logs.jsonl", src.Dir)
		}
	}
	r := a.report()
	r.Dir = srcs[0].Dir
	if err := r.health(a); err != nil {
		return nil, err
	}
	r.absences(a)
	r.receipts(srcs)
	r.summarise()
	return r, nil
}

func (a *aggregator) report() *Report {
	r := &Report{Version: ReportVersion}
	for k, v := range a.identity {
		sort.Strings(v)
		a.identity[k] = v
	}
	r.Job = Job{Identity: a.identity, Start: unixMs(a.firstMs), End: unixMs(a.lastMs),
		DurationSeconds: Value(math.NaN()), Producers: a.producers, MetricNames: a.metricNames}
	if a.firstMs > 0 {
		r.Job.DurationSeconds = Value(float64(a.lastMs-a.firstMs) / 1000)
	}
	for _, d := range a.dirs {
		if d.node != "" && !contains(r.Job.Nodes, d.node) {
			r.Job.Nodes = append(r.Job.Nodes, d.node)
		}
	}
	r.Gym = a.gym()
	r.ModelServers = a.modelServers()
	r.Routers = a.routers()
	r.GPUs = a.gpus()
	r.GPUSharing = a.gpuSharing()
	r.Energy = a.energy(r)
	r.Hosts = a.hosts(r.Job.Nodes)
	r.Spans = a.spanReport()
	r.Errors = Errors{Spans: a.errorSpans, SpanExamples: a.errorSpanEx, Logs: a.errorLogs,
		LogExamples: a.errorLogEx, LogsBySeverity: a.logsBySev}
	if r.Errors.SpanExamples == nil {
		r.Errors.SpanExamples = []ErrorSpan{}
	}
	if r.Errors.LogExamples == nil {
		r.Errors.LogExamples = []ErrorLog{}
	}
	return r
}

// byMetric returns the tracked series of a metric, in first-seen order.
func (a *aggregator) byMetric(name string) []*series {
	var out []*series
	for _, s := range a.order {
		if s.key.metric == name {
			out = append(out, s)
		}
	}
	return out
}

func points(pts [][2]float64) []Point {
	out := make([]Point, len(pts))
	for i, p := range pts {
		out[i] = Point(p)
	}
	return out
}

func (a *aggregator) gym() Gym {
	g := Gym{Verify: map[string]float64{}, VerifySpans: a.verifySpans, RolloutRate: map[string][]Point{}, RolloutsOverTime: map[string][]Point{},
		RolloutsPerMinute: Value(math.NaN()), VerifySuccess: Value(math.NaN())}
	var rollouts, verifies []*spanStat
	for k, st := range a.spans {
		switch k[0] {
		case spanRollout:
			rollouts = append(rollouts, st)
		case spanVerify:
			verifies = append(verifies, st)
		}
	}
	g.RolloutSpans, g.VerifyLatency = spanQuantiles(rollouts), spanQuantiles(verifies)
	var sets [][]Bucket
	var hs histSummary
	for _, s := range a.byMetric(mRolloutMs) {
		if s.h == nil {
			continue
		}
		sets = append(sets, s.h.cumulative())
		hs.add(s.h)
		k := s.key.node + " " + s.key.producer
		g.RolloutsOverTime[k] = append(g.RolloutsOverTime[k], points(s.h.tl.pts)...)
		c := &counter{}
		for _, p := range s.h.tl.pts {
			c.add(int64(p[0]), p[1])
		}
		g.RolloutRate[s.key.node] = append(g.RolloutRate[s.key.node], points(c.rates())...)
	}
	g.RolloutHistogram = unknownQ()
	if len(sets) > 0 {
		g.RolloutHistogram = histQuantiles(mergeBuckets(sets...), hs)
	}
	g.RolloutsCounted, g.RolloutsWindowSeconds = Value(math.NaN()), Value(math.NaN())
	count := hs.count
	// Rollouts per minute: the rollout spans over the time from the first
	// one's start to the last one's end; without spans, the histogram's
	// count over the run's time span.
	switch {
	case g.RolloutSpans.Count > 0 && a.rolloutLast > a.rolloutFirst:
		g.RolloutsCounted, g.RolloutsWindowSeconds = g.RolloutSpans.Count, Value(float64(a.rolloutLast-a.rolloutFirst)/1000)
	case count > 0 && a.lastMs > a.firstMs:
		g.RolloutsCounted, g.RolloutsWindowSeconds = Value(count), Value(float64(a.lastMs-a.firstMs)/1000)
	}
	if g.RolloutsWindowSeconds.Known() {
		g.RolloutsPerMinute = g.RolloutsCounted / g.RolloutsWindowSeconds * 60
	}
	for _, s := range a.byMetric(mVerifyCount) {
		if s.c != nil {
			g.Verify[orNone(s.labels["result"])] += s.c.total()
		}
	}
	pass, all := 0.0, 0.0
	for r, n := range g.Verify {
		all += n
		if r == "pass" {
			pass += n
		}
	}
	if all == 0 {
		for r, n := range g.VerifySpans {
			all += float64(n)
			if r == "pass" {
				pass += float64(n)
			}
		}
	}
	if all > 0 {
		g.VerifySuccess = Value(pass / all)
	}
	a.gymTelemetry(&g)
	return g
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// spanQuantiles are the quantiles of every producer's spans of one name
// (exact while each producer's samples are all kept, from its uniform
// reservoir of 4096 beyond that).
func spanQuantiles(sts []*spanStat) Quantiles {
	var vs []float64
	n, total, min, max := 0, 0.0, math.Inf(1), 0.0
	for _, st := range sts {
		vs = append(vs, st.sample...)
		n += st.count
		total += st.totalMs
		max = math.Max(max, st.maxMs)
		if st.count > 0 {
			min = math.Min(min, st.minMs)
		}
	}
	return sampleQuantiles(vs, n, total, min, max)
}

type serverKey struct{ node, producer, model string }

func (a *aggregator) modelServers() []ModelServer {
	keyOf := func(s *series) serverKey {
		return serverKey{s.key.node, s.key.producer, s.labels["model_name"]}
	}
	var keys []serverKey
	bySrv := map[serverKey][]*series{}
	for _, s := range a.order {
		if !strings.HasPrefix(s.key.metric, "vllm_") || strings.HasPrefix(s.key.metric, routerPrefix) {
			continue
		}
		k := keyOf(s)
		if _, ok := bySrv[k]; !ok {
			keys = append(keys, k)
		}
		bySrv[k] = append(bySrv[k], s)
	}
	var out []ModelServer
	var allE2E, allTTFT [][]Bucket
	var allE2ES, allTTFTS histSummary
	nan := Value(math.NaN())
	total := ModelServer{Node: "(all)", Producer: "", Model: "", RateWindowSeconds: nan}
	sums := map[string]Value{"req": nan, "prompt": nan, "gen": nan}
	rates := map[string]Value{"prompt": nan, "gen": nan}
	for _, k := range keys {
		m := ModelServer{Node: k.node, Producer: k.producer, Model: k.model}
		m.Requests, m.PromptTokens, m.GenerationTokens = nan, nan, nan
		m.PromptTokensPerSecond, m.GenerationTokensPerSecond, m.RateWindowSeconds = nan, nan, nan
		m.RunningMean, m.RunningMax, m.WaitingMean, m.WaitingMax, m.KVCacheMean, m.KVCacheMax = nan, nan, nan, nan, nan, nan
		m.E2ELatency, m.TTFT = unknownQ(), unknownQ()
		var e2e, ttft, itl, tpot []*histogram
		for _, s := range bySrv[k] {
			switch s.key.metric {
			case mPromptTokens:
				m.PromptTokens = addV(m.PromptTokens, s.c.total())
				m.PromptTokensPerSecond = addV(m.PromptTokensPerSecond, s.c.rate())
				m.RateWindowSeconds = maxV(m.RateWindowSeconds, s.c.window())
				m.CounterResets = max(m.CounterResets, s.c.resets)
			case mGenTokens:
				m.GenerationTokens = addV(m.GenerationTokens, s.c.total())
				m.GenerationTokensPerSecond = addV(m.GenerationTokensPerSecond, s.c.rate())
				m.RateWindowSeconds = maxV(m.RateWindowSeconds, s.c.window())
				m.CounterResets = max(m.CounterResets, s.c.resets)
				m.GenerationPerSec = append(m.GenerationPerSec, points(s.c.rates())...)
			case mRequestSuccess:
				m.Requests = addV(m.Requests, s.c.total())
			case mRunning:
				m.RunningMean, m.RunningMax = Value(s.g.mean()), Value(s.g.max)
				m.RunningOverTime = points(s.g.tl.pts)
			case mWaiting:
				m.WaitingMean, m.WaitingMax = Value(s.g.mean()), Value(s.g.max)
				m.WaitingOverTime = points(s.g.tl.pts)
			case mKVCache, mKVCacheV0:
				m.KVCacheMean, m.KVCacheMax = Value(s.g.mean()), Value(s.g.max)
				m.KVCacheOverTime = points(s.g.tl.pts)
			case mE2E:
				e2e = append(e2e, s.h)
			case mTTFT:
				ttft = append(ttft, s.h)
			case mITL:
				itl = append(itl, s.h)
			case mTPOT:
				tpot = append(tpot, s.h)
			}
		}
		m.InterToken, _ = histFigures(interTokenLatency(itl, tpot))
		m.E2ELatency, m.E2EBuckets = histFigures(e2e)
		m.TTFT, m.TTFTBuckets = histFigures(ttft)
		if !m.Requests.Known() && len(e2e) > 0 {
			m.Requests = m.E2ELatency.Count
		}
		for _, h := range e2e {
			if h != nil {
				allE2E = append(allE2E, h.cumulative())
				allE2ES.add(h)
			}
		}
		for _, h := range ttft {
			if h != nil {
				allTTFT = append(allTTFT, h.cumulative())
				allTTFTS.add(h)
			}
		}
		total.RateWindowSeconds = maxV(total.RateWindowSeconds, float64(m.RateWindowSeconds))
		for name, v := range map[string]Value{"req": m.Requests, "prompt": m.PromptTokens, "gen": m.GenerationTokens} {
			sums[name] = addV(sums[name], float64(v))
		}
		for name, v := range map[string]Value{"prompt": m.PromptTokensPerSecond, "gen": m.GenerationTokensPerSecond} {
			rates[name] = addV(rates[name], float64(v))
		}
		total.CounterResets = max(total.CounterResets, m.CounterResets)
		out = append(out, m)
	}
	if len(out) < 1 {
		return []ModelServer{}
	}
	total.Requests, total.PromptTokens, total.GenerationTokens = sums["req"], sums["prompt"], sums["gen"]
	total.PromptTokensPerSecond, total.GenerationTokensPerSecond = rates["prompt"], rates["gen"]
	total.RunningMean, total.RunningMax, total.WaitingMean, total.WaitingMax, total.KVCacheMean, total.KVCacheMax = nan, nan, nan, nan, nan, nan
	total.E2ELatency, total.TTFT, total.InterToken = unknownQ(), unknownQ(), unknownQ()
	if len(allE2E) > 0 {
		total.E2ELatency = histQuantiles(mergeBuckets(allE2E...), allE2ES)
	}
	if len(allTTFT) > 0 {
		total.TTFT = histQuantiles(mergeBuckets(allTTFT...), allTTFTS)
	}
	if len(out) > 1 {
		out = append(out, total)
	}
	return out
}

func maxV(v Value, x float64) Value {
	if math.IsNaN(x) || (v.Known() && float64(v) >= x) {
		return v
	}
	return Value(x)
}

func addV(v Value, x float64) Value {
	if math.IsNaN(x) {
		return v
	}
	if !v.Known() {
		return Value(x)
	}
	return v + Value(x)
}

// histFigures merges the histograms of one server (several series of one
// metric: engines) into quantiles and chart buckets.
func histFigures(hs []*histogram) (Quantiles, HistogramBuckets) {
	var sets [][]Bucket
	var sum histSummary
	hb := HistogramBuckets{Bounds: []float64{}, Counts: []float64{}}
	for _, h := range hs {
		if h == nil || h.n == 0 {
			continue
		}
		sets = append(sets, h.cumulative())
		sum.add(h)
		if len(hb.Counts) == 0 {
			hb.Bounds = append(hb.Bounds, h.bounds...)
			hb.Counts = append(hb.Counts, h.inc...)
		} else if sameBounds(hb.Bounds, h.bounds) {
			for i := range h.inc {
				hb.Counts[i] += h.inc[i]
			}
		}
	}
	if len(sets) == 0 {
		return unknownQ(), hb
	}
	return histQuantiles(mergeBuckets(sets...), sum), hb
}

type gpuKey struct{ node, gpu, instance string }

func (a *aggregator) gpus() []GPU {
	var keys []gpuKey
	by := map[gpuKey]map[string]*series{}
	for _, s := range a.order {
		if !strings.HasPrefix(s.key.metric, "DCGM_FI_") || s.g == nil {
			continue
		}
		k := gpuKey{s.key.node, s.labels["gpu"], s.labels[aGPUInstance]}
		if by[k] == nil {
			by[k] = map[string]*series{}
			keys = append(keys, k)
		}
		by[k][s.key.metric] = s
	}
	out := []GPU{}
	nan := Value(math.NaN())
	for _, k := range keys {
		m := by[k]
		g := GPU{Node: k.node, GPU: k.gpu, Instance: k.instance, UtilMean: nan, UtilMax: nan, MemoryUsedMax: nan, MemoryTotal: nan, PowerMean: nan, PowerMax: nan}
		for _, s := range m {
			g.Model, g.Profile, g.Attribution = s.labels["modelName"], s.labels[aGPUProfile], s.labels[aAttribution]
			break
		}
		if s := m[mGPUUtil]; s != nil {
			g.Model = s.labels["modelName"]
			g.UtilMean, g.UtilMax = Value(s.g.mean()), Value(s.g.max)
			g.Idle = s.g.max == 0
			g.UtilOverTime = points(s.g.tl.pts)
		}
		if s := m[mFBUsed]; s != nil {
			g.MemoryUsedMax = Value(s.g.max)
			if f := m[mFBFree]; f != nil {
				g.MemoryTotal = Value(s.g.last + f.g.last)
			}
		}
		if s := m[mPower]; s != nil {
			g.PowerMean, g.PowerMax = Value(s.g.mean()), Value(s.g.max)
		}
		out = append(out, g)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return false
		}
		a, _ := strconv.Atoi(out[i].GPU)
		b, _ := strconv.Atoi(out[j].GPU)
		if a != b {
			return a < b
		}
		x, _ := strconv.Atoi(out[i].Instance)
		y, _ := strconv.Atoi(out[j].Instance)
		return x < y
	})
	return out
}

func (a *aggregator) hosts(nodes []string) []Host {
	type acc struct {
		busy, all float64
		cpus      map[string]bool
		h         Host
		seen      bool
	}
	by := map[string]*acc{}
	get := func(n string) *acc {
		if by[n] == nil {
			nan := Value(math.NaN())
			by[n] = &acc{cpus: map[string]bool{}, h: Host{Node: n, CPUBusy: nan, MemoryTotal: nan, MemoryUsedMax: nan, Load1Max: nan}}
		}
		by[n].seen = true
		return by[n]
	}
	minAvail := map[string]float64{}
	for _, s := range a.order {
		switch s.key.metric {
		case mCPUSeconds:
			if s.c == nil {
				continue
			}
			// A CPU counts from its first sample; its busy share needs
			// two (a short job may have one scrape).
			x := get(s.key.node)
			x.cpus[s.labels["cpu"]] = true
			if s.c.n < 2 {
				continue
			}
			inc := s.c.total() - s.c.firstAdj
			x.all += inc
			if s.labels["mode"] != "idle" {
				x.busy += inc
			}
		case mMemTotal:
			get(s.key.node).h.MemoryTotal = Value(s.g.max)
		case mMemAvailable:
			get(s.key.node)
			minAvail[s.key.node] = s.g.min
		case mLoad1:
			x := get(s.key.node)
			x.h.Load1Max = Value(s.g.max)
			x.h.Load1OverTime = points(s.g.tl.pts)
		}
	}
	out := []Host{}
	for _, n := range nodes {
		x := by[n]
		if x == nil {
			continue
		}
		x.h.CPUs = len(x.cpus)
		if x.all > 0 {
			x.h.CPUBusy = Value(x.busy / x.all)
		}
		if av, ok := minAvail[n]; ok && x.h.MemoryTotal.Known() {
			x.h.MemoryUsedMax = x.h.MemoryTotal - Value(av)
		}
		out = append(out, x.h)
	}
	return out
}

func (a *aggregator) spanReport() Spans {
	sp := Spans{ByName: []SpanName{}, ByP99: []SpanName{}, Slowest: a.slowest, SpanMetrics: []SpanMetric{}}
	if sp.Slowest == nil {
		sp.Slowest = []SlowSpan{}
	}
	all := make([]*spanStat, 0, len(a.spans)+1)
	for _, st := range a.spans {
		all = append(all, st)
	}
	if a.otherSpans != nil {
		all = append(all, a.otherSpans)
	}
	for _, st := range all {
		sp.Total += st.count
		sp.ByName = append(sp.ByName, SpanName{Name: st.name, Producer: st.producer, TotalMs: st.totalMs, Errors: st.errors,
			Duration: sampleQuantiles(st.sample, st.count, st.totalMs, st.minMs, st.maxMs)})
	}
	sort.Slice(sp.ByName, func(i, j int) bool {
		if sp.ByName[i].TotalMs != sp.ByName[j].TotalMs {
			return sp.ByName[i].TotalMs > sp.ByName[j].TotalMs
		}
		return sp.ByName[i].Name < sp.ByName[j].Name
	})
	sp.ByP99 = append(sp.ByP99, sp.ByName...)
	sort.SliceStable(sp.ByP99, func(i, j int) bool { return sp.ByP99[i].Duration.P99 > sp.ByP99[j].Duration.P99 })
	// Span metrics: by span.name over every node and producer.
	type smAcc struct {
		calls float64
		sets  [][]Bucket
		sum   histSummary
	}
	var names []string
	by := map[string]*smAcc{}
	for _, s := range a.order {
		if s.key.metric != mSpanCalls && s.key.metric != mSpanDuration {
			continue
		}
		n := s.labels["span.name"]
		if by[n] == nil {
			by[n] = &smAcc{}
			names = append(names, n)
		}
		x := by[n]
		if s.c != nil {
			x.calls += s.c.total()
		}
		if s.h != nil {
			x.sets = append(x.sets, s.h.cumulative())
			x.sum.add(s.h)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		x := by[n]
		m := SpanMetric{Name: n, Calls: Value(x.calls), Duration: unknownQ(), DurationFrom: "histogram"}
		if len(x.sets) > 0 {
			m.Duration = histQuantiles(mergeBuckets(x.sets...), x.sum)
		}
		// The raw spans, where traces.jsonl has them, say more than the
		// connector's buckets.
		var raw []*spanStat
		for k, st := range a.spans {
			if k[0] == n {
				raw = append(raw, st)
				m.Spans += st.count
			}
		}
		if m.Spans > 0 {
			m.Duration, m.DurationFrom = spanQuantiles(raw), "spans"
		}
		sp.SpanMetrics = append(sp.SpanMetrics, m)
	}
	return sp
}

// health fills Health from the dirs read, their collector.yaml targets and
// state.json.
func (r *Report) health(a *aggregator) error {
	r.Health = Health{Dirs: []DirHealth{}, FailedTargets: []TargetHealth{}, DroppedSeries: a.droppedSer, SkippedPoints: a.skipped}
	for _, d := range a.dirs {
		dh := DirHealth{Source: d.src, NodeName: d.node, Lines: d.lines, BadLines: d.bad, Points: d.points, Spans: d.spans,
			Logs: d.logs, Targets: []TargetHealth{}}
		if len(d.firstBad) > 0 {
			dh.FirstBad = d.firstBad
		}
		for _, n := range d.bad {
			r.Health.BadLines += n
		}
		// The targets of collector.yaml, their scrapes counted from the
		// up points read (no second pass over metrics.jsonl).
		ts, _, err := configTargets(d.src.Dir)
		switch {
		case errors.Is(err, os.ErrNotExist): // no collector.yaml: a backend's files
		case err != nil:
			return err
		}
		for _, t := range ts {
			th := TargetHealth{Dir: d.src.Dir, Job: t.Job, Instance: t.Instance}
			if c := d.up[[2]string{t.Job, t.Instance}]; c != nil {
				th.Scrapes, th.Answered, th.WarmingUp, th.Ended = c.counts()
			}
			if s := d.scrape[[2]string{t.Job, t.Instance}]; s != nil {
				th.LimitHits = s.LimitHits
			}
			dh.Targets = append(dh.Targets, th)
			if th.Failed() > 0 || th.Scrapes == 0 {
				r.Health.FailedTargets = append(r.Health.FailedTargets, th)
			}
		}
		if st, err := jobdir.ReadState(d.src.Dir); err == nil {
			dh.State = &DirState{Status: st.Status, Error: st.Error, Restarts: st.Restarts, ExportProblems: st.ExportProblems}
		}
		r.Health.Dirs = append(r.Health.Dirs, dh)
	}
	return nil
}

// receipts reads each node dir's receipt.json and puts what went wrong in
// Trouble.
func (r *Report) receipts(srcs []Source) {
	r.Receipts, r.Trouble = []NodeReceipt{}, []string{}
	missing := 0
	var lost, other []string
	replay := ""
	for _, s := range srcs {
		if _, err := os.Stat(filepath.Join(s.Dir, jobdir.ConfigFile)); err != nil {
			continue // not a collector's dir
		}
		nr := NodeReceipt{Dir: s.Dir}
		rc, err := receipt.Read(s.Dir)
		if err != nil {
			nr.Missing = err.Error()
			missing++
		} else {
			nr.Receipt, nr.Summary = rc, rc.Summary()
			if rc.Trouble() || !rc.Complete() {
				for _, l := range nr.Summary {
					t := strings.TrimSpace(l)
					switch {
					case strings.HasPrefix(t, "LOST:"):
						lost = append(lost, fmt.Sprintf("%s: %s", rc.Node, t))
					case strings.HasPrefix(t, "UNKNOWN:") || strings.Contains(l, "INCOMPLETE") || strings.Contains(l, "NO FIGURES"):
						other = append(other, fmt.Sprintf("%s: %s", rc.Node, t))
					case strings.Contains(t, "replay"):
						replay = t
					}
				}
			}
		}
		r.Receipts = append(r.Receipts, nr)
	}
	// What the backend lost first, then what to do about it, then what is
	// not known.
	r.Trouble = append(r.Trouble, lost...)
	if len(lost) > 0 && replay != "" {
		r.Trouble = append(r.Trouble, replay)
	}
	r.Trouble = append(r.Trouble, other...)
	// A final receipt counts everything the state's export problems say:
	// said once, from the receipt.
	final := map[string]bool{}
	for _, nr := range r.Receipts {
		if nr.Receipt != nil && nr.Receipt.Complete() {
			final[filepath.Clean(nr.Dir)] = true
		}
	}
	for _, d := range r.Health.Dirs {
		if d.State != nil && d.State.ExportProblems != "" && !final[filepath.Clean(d.Dir)] {
			r.Trouble = append(r.Trouble, fmt.Sprintf("%s: the collector reported export problems: %s", nodeOr(d), d.State.ExportProblems))
		}
	}
	if missing > 0 {
		r.Trouble = append(r.Trouble, fmt.Sprintf("no receipt.json in %d of %d node dirs: what reached the backend is unknown there "+
			"(the receipt is written at the collector's drain; a job still running, or a collector killed before its drain, has none)", missing, len(r.Receipts)))
	}
}

func nodeOr(d DirHealth) string {
	if d.NodeName != "" {
		return d.NodeName
	}
	return d.Dir
}
