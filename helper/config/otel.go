// Package config owns the otel: block of gym-otel-spank: its keys and
// defaults, strict YAML loading, the layers a job's settings come from
// (built-in defaults, the site file, inline plugstack overrides, the job's
// NeMo Gym submit config, inline SPEC items), the SPEC grammar of
// --gym-otel=, the validation run before anything is submitted, and the
// resolved settings the SPANK plugin forwards to the job's nodes.
//
// Every error names the key it is about as otel.<key> (or the SPEC item, or
// the Gym config path such as services.policy.port), so a user knows what to
// fix.
package config

import "strings"

// Otel is the resolved otel: block. Field comments give the YAML key, the
// default (from Defaults) and the unit.
type Otel struct {
	// Enabled (enabled, default true) turns the collector on for the job.
	Enabled bool `json:"enabled"`
	// Endpoint (endpoint, required when enabled) is the OTLP/HTTP base URL of
	// the site backend; the exporter appends /v1/{metrics,traces,logs}.
	// Normalised at load: a trailing slash and a trailing /v1/<signal> are
	// removed (see NormalizeEndpoint).
	Endpoint string `json:"endpoint"`
	// ServiceName (service_name, required when enabled) is the service.name
	// resource attribute the backend routes by.
	ServiceName string `json:"service_name"`
	// TokenEnv (token_env, default OTEL_TOKEN) names the variable of the
	// submitting shell that holds the backend's bearer token.
	TokenEnv string `json:"token_env"`
	// Binary (binary, default /usr/bin/otelcol-gym) is the absolute path of
	// the collector on the compute nodes. Not checked at submit.
	Binary string `json:"binary"`
	// Container (container, default none) is an image to run the collector
	// from instead of Binary, through ContainerRuntime.
	Container string `json:"container,omitempty"`
	// ContainerRuntime (container_runtime) is the command template that runs
	// Container; see the lifecycle package for the placeholders it receives.
	ContainerRuntime string `json:"container_runtime"`
	// Component (component, default gym-vllm) is the display-name prefix of
	// scraped model services: service.name.override = <component>/<service>.
	Component string `json:"component"`
	// GymTelemetry (gym_telemetry, default true) switches Gym's own nemo-lens
	// telemetry on in the job's tasks.
	GymTelemetry bool `json:"gym_telemetry"`
	// GymSpanGroups (gym_span_groups, default "default,verify") is the comma
	// list of Gym span groups switched on in the job.
	GymSpanGroups string `json:"gym_span_groups"`
	// GymLogs (gym_logs, default true) ships Gym's Python logging as OTel
	// logs and adds the logs pipeline.
	GymLogs bool `json:"gym_logs"`
	// GPUMetricsPort (gpu_metrics_port, default 9400, null skips) is the
	// dcgm-exporter port on each node; 0 means skip.
	GPUMetricsPort int `json:"gpu_metrics_port"`
	// NodeMetricsPort (node_metrics_port, default 9100, null skips) is the
	// node_exporter port on each node; 0 means skip.
	NodeMetricsPort int `json:"node_metrics_port"`
	// ScrapeIntervalSeconds (scrape_interval_seconds, default 15, 1..3600).
	ScrapeIntervalSeconds int `json:"scrape_interval_seconds"`
	// HealthCheckTimeoutSeconds (health_check_timeout_seconds, default 300,
	// 1..3600) bounds the wait for the collector's health check at job start;
	// the plugin's prolog_timeout caps it further.
	HealthCheckTimeoutSeconds int `json:"health_check_timeout_seconds"`
	// ShutdownTimeoutSeconds (shutdown_timeout_seconds, default 20, 1..60)
	// bounds the collector's clean shutdown at the drain before SIGKILL.
	// Validate refuses less than MinShutdownSeconds (export_timeout_seconds
	// for each backend exporter, one after another, + ShutdownSlackSeconds).
	ShutdownTimeoutSeconds int `json:"shutdown_timeout_seconds"`
	// ExportTimeoutSeconds (export_timeout_seconds, default 5, 1..60) is the
	// backend exporter's per-request timeout; it also bounds retries, so the
	// drain stays bounded when the backend hangs.
	ExportTimeoutSeconds int `json:"export_timeout_seconds"`
	// OnFailure (on_failure, default continue): what a job's tasks do when
	// the node's collector failed to start: "continue" (run without the
	// telemetry env, warn once) or "fail" (fail the tasks with the reason).
	OnFailure string `json:"on_failure"`
	// OutputDirMode (output_dir_mode, default "0700") is the octal mode of the
	// output directory; traces and logs hold prompts.
	OutputDirMode string `json:"output_dir_mode"`
	// MemoryLimitMiB (memory_limit_mib, default 512, 32..65536) is the
	// collector's memory_limiter limit and sets its GOMEMLIMIT.
	MemoryLimitMiB int `json:"memory_limit_mib"`
	// TokenResourceAttribute (token_resource_attribute, default false) also
	// stamps "Bearer <token>" as the Authorization resource attribute on the
	// way to the backend, for routing proxies that need it; never in files.
	TokenResourceAttribute bool `json:"token_resource_attribute"`
	// ScrapeSampleLimit (scrape_sample_limit, default 50000, 100..10000000)
	// is every scrape job's sample_limit: a page with more samples fails
	// the whole scrape (up = 0).
	ScrapeSampleLimit int `json:"scrape_sample_limit"`
	// ScrapeBodySizeLimitMiB (scrape_body_size_limit_mib, default 16,
	// 1..1024) is every scrape job's body_size_limit in MiB (uncompressed):
	// reading stops there and the scrape fails.
	ScrapeBodySizeLimitMiB int `json:"scrape_body_size_limit_mib"`
	// ScrapeLabelLimit (scrape_label_limit, default 64, 8..1000) is every
	// scrape job's label_limit: labels per series.
	ScrapeLabelLimit int `json:"scrape_label_limit"`
	// ScrapeLabelNameLengthLimit (scrape_label_name_length_limit, default
	// 256, 32..65536) is every scrape job's label_name_length_limit in bytes.
	ScrapeLabelNameLengthLimit int `json:"scrape_label_name_length_limit"`
	// ScrapeLabelValueLengthLimit (scrape_label_value_length_limit, default
	// 4096, 64..1048576) is every scrape job's label_value_length_limit in
	// bytes.
	ScrapeLabelValueLengthLimit int `json:"scrape_label_value_length_limit"`
	// Delivery (delivery, default "files") is who sends the job's data to
	// the backend: "files", the supervisor, from the job's jsonl files at
	// a checkpointed position (helper/delivery): the collector renders no
	// backend exporter, an outage of any length is caught up from the
	// files, and what is left at the job's end is what `replay` sends; or
	// "collector", the collector's own OTLP/HTTP exporter, live, dropping
	// what its queue cannot hold during an outage (counted in the
	// receipt); or "none", remote export off: the job's files are its
	// only copy, no endpoint or token is needed, and `replay` sends them
	// later where wanted. "" (settings forwarded by an older submit) reads
	// as "files".
	Delivery string `json:"delivery,omitempty"`
	// DeliveryRateCap (delivery_rate_cap, default 20000, 100..10000000) is
	// each node's cap with delivery "files", items per second over its
	// three files: N nodes catching up at once send at most N times it.
	DeliveryRateCap int `json:"delivery_rate_cap,omitempty"`
	// LocalNodeMetrics (local_node_metrics, default
	// DefaultLocalNodeMetrics; null keeps every series) are the regular
	// expressions (RE2, matched against the whole name) of the
	// node_exporter series the job's files keep; the node_exporter scrape
	// job's other series go to the backend only. nil keeps all. The same
	// key and semantics as Gym's otel block.
	LocalNodeMetrics []string `json:"local_node_metrics"`
	// LocalNodeMetricsExtra (local_node_metrics_extra, default none) are
	// patterns added to LocalNodeMetrics.
	LocalNodeMetricsExtra []string `json:"local_node_metrics_extra"`
}

// DefaultLocalNodeMetrics are the node_exporter series a job's files keep
// by default: CPU time, load, memory, pressure stall, network and
// InfiniBand byte totals, the categories Gym's published executor keeps in
// its local metrics.jsonl (docs.nvidia.com/nemo/gym v0.3.0,
// nemo_gym.orchestration.executors.otel; the page names the categories,
// not the patterns). Each is matched against the whole metric name.
var DefaultLocalNodeMetrics = []string{
	"node_cpu_seconds_total",
	"node_load(1|5|15)",
	"node_memory_(MemTotal|MemFree|MemAvailable|Buffers|Cached|SwapTotal|SwapFree)_bytes",
	"node_pressure_.*",
	"node_network_(receive|transmit)_bytes_total",
	"node_infiniband_port_data_(received|transmitted)_bytes_total",
}

// Delivery values (Otel.Delivery).
const (
	DeliveryCollector = "collector"
	DeliveryFiles     = "files"
	// DeliveryNone is remote export off: the files only (Gym's published
	// executor names the behaviour, not a key).
	DeliveryNone = "none"
)

// DefaultDeliveryRateCap is delivery_rate_cap's default, items per second.
const DefaultDeliveryRateCap = 20000

// FileDelivery reports whether the supervisor delivers the job's files to
// the backend (delivery "files", the default, or unset): then the
// collector has no backend exporter.
func (o Otel) FileDelivery() bool {
	return o.Delivery != DeliveryCollector && o.Delivery != DeliveryNone
}

// CollectorDelivery reports whether the collector's own exporter sends
// the job's data to the backend (delivery "collector").
func (o Otel) CollectorDelivery() bool { return o.Delivery == DeliveryCollector }

// RemoteExport reports whether anything of the job is sent to a backend
// at all (every delivery but "none"): without it no endpoint and no token
// are needed.
func (o Otel) RemoteExport() bool { return o.Delivery != DeliveryNone }

// Defaults returns the built-in defaults of the otel: block (the seed's
// table plus the keys this plugin adds).
func Defaults() Otel {
	return Otel{
		Enabled:                   true,
		TokenEnv:                  "OTEL_TOKEN",
		Binary:                    "/usr/bin/otelcol-gym",
		ContainerRuntime:          DefaultContainerRuntime,
		Component:                 "gym-vllm",
		GymTelemetry:              true,
		GymSpanGroups:             "default,verify",
		GymLogs:                   true,
		GPUMetricsPort:            9400,
		NodeMetricsPort:           9100,
		ScrapeIntervalSeconds:     15,
		HealthCheckTimeoutSeconds: 300,
		ShutdownTimeoutSeconds:    20,
		ExportTimeoutSeconds:      5,
		OnFailure:                 "continue",
		OutputDirMode:             "0700",
		MemoryLimitMiB:            512,

		ScrapeSampleLimit:           50000,
		ScrapeBodySizeLimitMiB:      16,
		ScrapeLabelLimit:            64,
		ScrapeLabelNameLengthLimit:  256,
		ScrapeLabelValueLengthLimit: 4096,

		Delivery:         DeliveryFiles,
		DeliveryRateCap:  DefaultDeliveryRateCap,
		LocalNodeMetrics: append([]string(nil), DefaultLocalNodeMetrics...),
	}
}

// DefaultContainerRuntime is the default container_runtime template: the
// collector image run with apptainer, sharing the host network, with the
// output directory and the rendered config bound in. --cleanenv starts the
// collector with none of the runtime's environment but what
// APPTAINERENV_<NAME> passes in as <NAME> (the supervisor sets that for
// every variable the collector needs); --no-eval passes those values
// without shell evaluation (Apptainer 1.1 and later; without it a "$" in a
// token would be expanded). Placeholders are listed at the supervise
// package's commandFor.
const DefaultContainerRuntime = "apptainer exec --cleanenv --no-eval --bind {output}:{output} {image} /otelcol-gym --config {config}"

type kind int

const (
	kindBool kind = iota
	kindString
	kindPort
	kindInt
	kindEnum
	kindMode
	// kindPatterns is a list of regular expressions: a YAML list, or as
	// text patterns separated by blanks; held in value.s joined by "\n".
	kindPatterns
)

// keyDef describes one key of the otel: block.
type keyDef struct {
	name     string
	kind     kind
	nullable bool // explicit null is allowed (ports: skip; container: none)
	min, max int
	enum     []string
	set      func(o *Otel, v value)
}

// value is one parsed setting: a key's new value, already typed.
type value struct {
	s    string
	i    int
	b    bool
	null bool
}

var keyDefs = []keyDef{
	{name: "enabled", kind: kindBool, set: func(o *Otel, v value) { o.Enabled = v.b }},
	{name: "endpoint", kind: kindString, set: func(o *Otel, v value) { o.Endpoint = v.s }},
	{name: "service_name", kind: kindString, set: func(o *Otel, v value) { o.ServiceName = v.s }},
	{name: "token_env", kind: kindString, set: func(o *Otel, v value) { o.TokenEnv = v.s }},
	{name: "binary", kind: kindString, set: func(o *Otel, v value) { o.Binary = v.s }},
	{name: "container", kind: kindString, nullable: true, set: func(o *Otel, v value) { o.Container = v.s }},
	{name: "container_runtime", kind: kindString, set: func(o *Otel, v value) { o.ContainerRuntime = v.s }},
	{name: "component", kind: kindString, set: func(o *Otel, v value) { o.Component = v.s }},
	{name: "gym_telemetry", kind: kindBool, set: func(o *Otel, v value) { o.GymTelemetry = v.b }},
	{name: "gym_span_groups", kind: kindString, set: func(o *Otel, v value) { o.GymSpanGroups = v.s }},
	{name: "gym_logs", kind: kindBool, set: func(o *Otel, v value) { o.GymLogs = v.b }},
	{name: "gpu_metrics_port", kind: kindPort, nullable: true, min: 1, max: 65535, set: func(o *Otel, v value) { o.GPUMetricsPort = v.i }},
	{name: "node_metrics_port", kind: kindPort, nullable: true, min: 1, max: 65535, set: func(o *Otel, v value) { o.NodeMetricsPort = v.i }},
	{name: "scrape_interval_seconds", kind: kindInt, min: 1, max: 3600, set: func(o *Otel, v value) { o.ScrapeIntervalSeconds = v.i }},
	{name: "health_check_timeout_seconds", kind: kindInt, min: 1, max: 3600, set: func(o *Otel, v value) { o.HealthCheckTimeoutSeconds = v.i }},
	{name: "shutdown_timeout_seconds", kind: kindInt, min: 1, max: 60, set: func(o *Otel, v value) { o.ShutdownTimeoutSeconds = v.i }},
	{name: "export_timeout_seconds", kind: kindInt, min: 1, max: 60, set: func(o *Otel, v value) { o.ExportTimeoutSeconds = v.i }},
	{name: "on_failure", kind: kindEnum, enum: []string{"continue", "fail"}, set: func(o *Otel, v value) { o.OnFailure = v.s }},
	{name: "output_dir_mode", kind: kindMode, set: func(o *Otel, v value) { o.OutputDirMode = v.s }},
	{name: "memory_limit_mib", kind: kindInt, min: 32, max: 65536, set: func(o *Otel, v value) { o.MemoryLimitMiB = v.i }},
	{name: "token_resource_attribute", kind: kindBool, set: func(o *Otel, v value) { o.TokenResourceAttribute = v.b }},
	{name: "scrape_sample_limit", kind: kindInt, min: 100, max: 10000000, set: func(o *Otel, v value) { o.ScrapeSampleLimit = v.i }},
	{name: "scrape_body_size_limit_mib", kind: kindInt, min: 1, max: 1024, set: func(o *Otel, v value) { o.ScrapeBodySizeLimitMiB = v.i }},
	{name: "scrape_label_limit", kind: kindInt, min: 8, max: 1000, set: func(o *Otel, v value) { o.ScrapeLabelLimit = v.i }},
	{name: "scrape_label_name_length_limit", kind: kindInt, min: 32, max: 65536, set: func(o *Otel, v value) { o.ScrapeLabelNameLengthLimit = v.i }},
	{name: "scrape_label_value_length_limit", kind: kindInt, min: 64, max: 1048576, set: func(o *Otel, v value) { o.ScrapeLabelValueLengthLimit = v.i }},
	{name: "delivery", kind: kindEnum, enum: []string{DeliveryCollector, DeliveryFiles, DeliveryNone}, set: func(o *Otel, v value) { o.Delivery = v.s }},
	{name: "delivery_rate_cap", kind: kindInt, min: 100, max: 10000000, set: func(o *Otel, v value) { o.DeliveryRateCap = v.i }},
	{name: "local_node_metrics", kind: kindPatterns, nullable: true, set: func(o *Otel, v value) { o.LocalNodeMetrics = splitPatterns(v.s) }},
	{name: "local_node_metrics_extra", kind: kindPatterns, set: func(o *Otel, v value) { o.LocalNodeMetricsExtra = splitPatterns(v.s) }},
}

// splitPatterns is a kindPatterns value's patterns; nil for "" (null).
func splitPatterns(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Keys returns the keys of the otel: block in documentation order.
func Keys() []string {
	out := make([]string, len(keyDefs))
	for i, k := range keyDefs {
		out[i] = k.name
	}
	return out
}

func lookupKey(name string) (*keyDef, bool) {
	for i := range keyDefs {
		if keyDefs[i].name == name {
			return &keyDefs[i], true
		}
	}
	return nil, false
}
