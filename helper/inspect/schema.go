package inspect

import (
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"math"
	"strconv"
	"time"

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
	// Outcome is how the job ended (state, exit code, elapsed time,
	// nodes), its Gym answer and what reached the backend: the report's
	// first block (outcome.go).
	Outcome Outcome `json:"outcome"`
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
	// Phases are the job's Slurm phases per node, from the phase spans
	// the supervisor sends (phases.go); FirstRollout is where the time
	// went between the job's submit and its first rollout.
	Phases       []NodePhases `json:"phases"`
	FirstRollout FirstRollout `json:"first_rollout"`
	// TraceTree is the job's tree of spans: run, step, process, rollouts
	// (tree.go).
	TraceTree TraceTree `json:"trace_tree"`
	// StepEnergy is the energy of the job's GPUs per node and Slurm step,
	// RoleEnergy per Gym role and step with its joules per 1,000
	// generation tokens, each with its verdict; EnergyMatching how the
	// GPUs were named (stepenergy.go). Empty without dcgm-exporter's GPU
	// series.
	StepEnergy     []StepEnergy   `json:"step_energy"`
	RoleEnergy     []RoleEnergy   `json:"role_energy"`
	EnergyMatching EnergyMatching `json:"energy_matching"`
	// HostEnergy is each node's host energy (RAPL, where the site opted
	// in: plugstack host_power=rapl) over its whole sampled run (Step "")
	// and per Slurm step, each with its verdict; the node's, not the
	// job's (hostenergy.go). Empty when no node has host energy.
	HostEnergy []HostEnergy `json:"host_energy"`
	// Cgroups are the job's cgroups' usage and pressure per node and
	// group, from the cgroup readings (cgroups.go).
	Cgroups []CgroupUsage `json:"cgroups"`
	// JobLookalikes counts what looked like the plugin's own telling but
	// was sent by the job: not counted as Slurm's phases or cgroups.
	JobLookalikes JobLookalikes `json:"job_lookalikes"`
	Errors        Errors        `json:"errors"`
	Health        Health        `json:"health"`
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
	// service.name and host.name seen, each value as the files typed it
	// (a JSON string, number or boolean), in natural order (gn2 before
	// gn10); host.name up to 4096 values, the others up to 50.
	Identity map[string][]AttrValue `json:"identity"`
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
	// PowerOverTime is DCGM_FI_DEV_POWER_USAGE over time (W), thinned as
	// the other series.
	PowerOverTime []Point `json:"power_over_time,omitempty"`
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
	// Total is the job's own spans (every span of the files but the
	// plugin's phase spans), the spans ranked below.
	Total int `json:"total"`
	// PhaseSpans is the plugin's Slurm phase spans (marked
	// gym_otel.source=slurm), shown as the phases, not ranked here.
	PhaseSpans int `json:"phase_spans"`
	// InFiles is every span of the files read: Total + PhaseSpans, the
	// sum of health.dirs[].spans; what the receipts count as sent (the
	// collector's and the supervisor's appended lines) when nothing was
	// lost.
	InFiles int `json:"in_files"`
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
	Name string `json:"name"`
	// Calls is the span name's one calls figure: the connector's call
	// counter (ConnectorCalls), or, where that is below the duration
	// histogram's count or the raw spans of the name (Spans), the larger
	// of those, said in CallsNote.
	Calls Value `json:"calls"`
	// ConnectorCalls is the connector's traces.span.metrics.calls summed
	// over the name's series.
	ConnectorCalls Value `json:"connector_calls"`
	// CallsNote says why Calls is not ConnectorCalls ("" when it is).
	CallsNote string `json:"calls_note,omitempty"`
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
	// DroppedPhaseSpans counts the Slurm phase spans past the bounds (256
	// a node, 1024 nodes); DroppedCgroupPoints the cgroup points of
	// groups past the bound of 4096.
	DroppedPhaseSpans   int `json:"dropped_phase_spans,omitempty"`
	DroppedCgroupPoints int `json:"dropped_cgroup_points,omitempty"`
}

// DirHealth is one node dir: its files and its collector's state.json.
type DirHealth struct {
	Source
	// NodeName is the node the dir's data came from.
	NodeName string `json:"node_name"`
	// Lines and BadLines count each file's lines and those that did not
	// parse; FirstBad is each file's first parse error. Writing is, per
	// file, the bytes of its last line when that line has no newline yet
	// and state.json says the collector runs: a line being written, not
	// counted in Lines or BadLines.
	Lines    map[string]int    `json:"lines"`
	BadLines map[string]int    `json:"bad_lines"`
	FirstBad map[string]string `json:"first_bad,omitempty"`
	Writing  map[string]int    `json:"writing_bytes,omitempty"`
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
	// ForeignTargets are the model-service targets the supervisor saw
	// served by another uid than the job's user (jobdir.ForeignTarget):
	// their series in the run are not the job's.
	ForeignTargets []jobdir.ForeignTarget `json:"foreign_targets,omitempty"`
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

// JobLookalikes are the items that look like the plugin's own telling but
// lack its mark (the resource attribute contract.SourceKey="slurm", which
// the node's collector stamps on the supervisor's phase spans and cgroup
// scrape only, and deletes from whatever the job's tasks send): the job
// sent them. They are counted among the job's own spans and series, never
// as its Slurm phases or its cgroups.
type JobLookalikes struct {
	// PhaseSpans counts spans of the phase scope (gym-otel-spank/slurm-phases)
	// without the mark.
	PhaseSpans int `json:"phase_spans"`
	// CgroupPoints counts metric points of a cgroup_* name of producer
	// "cgroup" (the cgroup readings') without the mark.
	CgroupPoints int `json:"cgroup_points"`
}
