// Package render turns a job's resolved settings, its identity on one node,
// the chosen loopback ports and the output directory into the collector's
// YAML configuration. Render is a pure function: same input, same bytes.
//
// What the configuration does (the seed's "What is exported"):
//   - receivers: OTLP gRPC and HTTP on 127.0.0.1 at per-job ports, requiring a
//     per-job bearer token (bearertokenauth/receivers); a Prometheus receiver
//     with one scrape job per model service on this node
//     (<component>/<service>), plus "dcgm" and "node" when their ports are set,
//     whose targets are scraped every interval from the collector's start
//     (discovery_reload_on_startup), each at the phase chosen with a
//     query parameter when Input.FirstScrape asks (phase.go).
//   - the plugin's own receiver, apart from the job's: otlp/plugin
//     (OTLP/HTTP on 127.0.0.1 at Ports.Plugin, behind a second bearer
//     token, ${env:GYM_OTEL_PLUGIN_TOKEN}, that only the supervisor and
//     the collector are given: the supervisor's Slurm phase spans and its
//     readings of the job's cgroups and the node's energy, producer
//     "cgroup"). Its pipelines (traces/plugin, metrics/plugin)
//     stamp gym_otel.source=slurm on every resource (resource/source); the
//     job's pipelines delete that key from everything they receive
//     (resource/unsource), so nothing a task sends carries it. Both share
//     the file exporters, the backend exporter and span_metrics.
//   - processors: memory_limiter first; filter/stale drops the staleness
//     markers of failed scrapes (points without a value); filter/dcgm keeps only the job's GPUs
//     and GPU instances when Slurm named them, and transform/dcgm stamps gpu_attribution on
//     each dcgm series kept (gpus.go); transform/names (the job's pipelines) renames "<prefix>:<name>" metrics
//     to "<prefix>_<name>" after parsing, so types survive; resource/identity
//     stamps the identity on every resource; batch last.
//   - connector span_metrics: a call counter and a duration histogram per span
//     name, producer (service.name.override) and sandbox provider.
//   - exporters: file/{metrics,traces,logs} into the output dir (appending) and
//     otlp_http/backend, whose bearer token is only ever ${env:<token_env>},
//     behind a sending queue of a few requests that drops (and counts) when
//     full: the backend's trouble never refuses or drops the files' data
//     (sendingQueue says why).
package render

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gpudev"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/memory"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// MinCollectorVersion is the oldest collector release the rendered
// configuration has been run with (component type names otlp_http and
// span_metrics, the exclude_dimensions of span_metrics). The supervisor
// refuses an older otel.binary.
const MinCollectorVersion = "0.161.0"

// ReceiverTokenEnv is the collector environment variable holding the per-job
// receiver token; the configuration references it, never holds it.
const ReceiverTokenEnv = "GYM_OTEL_RECEIVER_TOKEN"

// PluginTokenEnv is the collector environment variable holding the per-job
// token of the plugin's own receiver (PluginReceiver) and of the
// collector's final figures (Ports.Final): minted by the supervisor, given
// to the collector only, never in the task environment, root's record or a
// file (a process of the job's user can still read the collector's
// environment: /proc/<pid>/environ is open to the same uid).
const PluginTokenEnv = "GYM_OTEL_PLUGIN_TOKEN"

// ConfigEnv is the collector environment variable holding its whole
// configuration, which the collector reads by content (`--config
// env:GYM_OTEL_COLLECTOR_CONFIG`, its env confmap provider) rather than from
// a path someone could swap. The configuration holds no secret: the tokens
// stay ${env:...} references.
const ConfigEnv = "GYM_OTEL_COLLECTOR_CONFIG"

// Ports are the loopback TCP ports of one collector (jobdir.Ports: state.json
// shows them too).
type Ports = jobdir.Ports

// FinalFlushIntervalMillis is the interval of the collector's periodic
// reader towards Ports.Final, in ms (24 h): only its flush at shutdown is
// wanted.
const FinalFlushIntervalMillis = 86400000

// FinalExportTimeoutMillis bounds that reader's export, in ms.
const FinalExportTimeoutMillis = 2000

// Job holds the facts of the job on this node. Empty strings are omitted from
// the telemetry.
type Job struct {
	// User is the job's user name (from the job's uid).
	User string
	// JobID is the Slurm job id (SLURM_JOB_ID), stamped as a string
	// (slurm_job_id). A requeued or preempted job keeps its job id.
	JobID string
	// RestartCount is Slurm's restart count of the job
	// (SLURM_JOB_RESTART_COUNT, decimal: 0 for the first run), stamped as
	// an Int (slurm_job_restart_count); "" or a non-number is not stamped.
	RestartCount string
	// SLUID is the Slurm-wide unique id of this run (SLURM_JOB_SLUID,
	// Slurm 25.11+), stamped as a string (slurm_job_sluid) when set.
	SLUID string
	// RunID is the run identity: the Gym run id, else the job id.
	RunID string
	// Benchmark, Model and Cluster come from the settings' identity; Cluster
	// defaults to SLURM_CLUSTER_NAME on the node.
	Benchmark, Model, Cluster string
	// Node is this node's name (host.name).
	Node string
	// NodeIndex is the node's position in the job's node list (0 first).
	NodeIndex int
	// GPUs are the job's GPU indexes on this node (SLURM_JOB_GPUS:
	// Slurm's gres indexes, which are dcgm-exporter's gpu on a node
	// without MIG devices); nil when Slurm did not say.
	GPUs []string
	// GPUDevices are the entries of CUDA_VISIBLE_DEVICES in the prolog's
	// environment: per device Slurm allocated, its MIG UUID
	// ("MIG-<uuid>", or "MIG-GPU-<uuid>/<gi>/<ci>" with older drivers),
	// its GPU UUID ("GPU-<uuid>", Slurm 25.11 and later) or its index; nil
	// when unset. With neither GPUs nor GPUDevices every GPU is kept
	// (gpu_attribution "unnamed").
	GPUDevices []string
	// GPUPCI are the same devices named by PCI bus id
	// (jobfacts.Facts.GPUPCI): when set the collector keeps dcgm-exporter's
	// series by pci_bus_id instead.
	GPUPCI []gpudev.Device
	// SlurmCluster is SLURM_CLUSTER_NAME as Slurm gives it ("" when
	// unknown), whatever Cluster says: Lens' slurm.cluster.name and the
	// seed of its nv.dl.job.uuid (lens.go).
	SlurmCluster string
	// ArrayJobID and ArrayTaskID are SLURM_ARRAY_JOB_ID and
	// SLURM_ARRAY_TASK_ID for an array element ("" otherwise, or when the
	// prolog was not told).
	ArrayJobID, ArrayTaskID string
	// HeadNode is the node the batch script runs on: the first node of
	// the job's node list ("" when the prolog was not told the list).
	HeadNode string
}

// JobOf is the Job of one node: the facts Slurm gave its prolog (f) and the
// settings' identity (identity.cluster wins over SLURM_CLUSTER_NAME).
func JobOf(resolved *config.Resolved, f jobfacts.Facts) Job {
	cluster := resolved.Identity.Cluster
	if cluster == "" {
		cluster = f.Cluster
	}
	return Job{
		User:         f.User,
		JobID:        f.JobID,
		RestartCount: f.RestartCount,
		SLUID:        f.SLUID,
		RunID:        jobfacts.RunID(resolved, f),
		Benchmark:    resolved.Identity.Benchmark,
		Model:        resolved.Identity.Model,
		Cluster:      cluster,
		Node:         f.Node,
		NodeIndex:    f.NodeIndex,
		GPUs:         f.GPUs,
		GPUDevices:   f.GPUDevices,
		GPUPCI:       f.GPUPCI,
		SlurmCluster: f.Cluster,
		ArrayJobID:   f.ArrayJobID,
		ArrayTaskID:  f.ArrayTaskID,
		HeadNode:     f.HeadNode,
	}
}

// Input is everything Render needs.
type Input struct {
	// Resolved is the job's validated resolved settings.
	Resolved *config.Resolved
	// Job is the job on this node.
	Job Job
	// Ports are the chosen loopback ports.
	Ports Ports
	// OutputDir is the absolute directory of the jsonl files.
	OutputDir string
	// FilesAt, when set, is the absolute path the collector opens its
	// jsonl files under instead of OutputDir: the held output dir as the
	// collector inherits it ("/proc/self/fd/3", heldir.ChildAt), so that
	// no rename of a dir on the way can redirect its writes. The
	// configuration kept in the output dir for people, inspect and replay
	// is rendered without it (the real paths).
	FilesAt string
	// ScrapeOnShutdown sets the Prometheus receiver's scrape_on_shutdown:
	// the collector scrapes every target once more when it is stopped
	// (the supervisor's final scrape at the batch script's end).
	ScrapeOnShutdown bool
	// FirstScrape, when set, has every scrape target's first scrape come
	// at FirstScrape.At (phase.go): each scrape job gets a PhaseParam.
	// Nil leaves the phases to Prometheus' hash (between 0 and one
	// interval after the collector's start).
	FirstScrape *FirstScrape
}

// Render returns the collector YAML for in. Errors: a missing port or a
// relative output dir.
func Render(in Input) ([]byte, error) {
	if err := check(in); err != nil {
		return nil, err
	}
	scrapes := scrapeJobs(in)
	procs, metricsProcs, pluginMetricsProcs := processors(in, len(scrapes) > 0)
	exts := []string{"health_check", ReceiverAuth}
	if in.Ports.Plugin != 0 {
		exts = append(exts, PluginAuth)
	}
	doc := omap{
		{"receivers", receivers(in, scrapes)},
		{"processors", procs},
		{"connectors", connectors()},
		{"exporters", exporters(in)},
		{"extensions", extensions(in)},
		{"service", omap{
			{"extensions", exts},
			{"telemetry", telemetry(in)},
			{"pipelines", pipelines(in, len(scrapes) > 0, metricsProcs, pluginMetricsProcs)},
		}},
	}
	var buf bytes.Buffer
	buf.WriteString(header(in))
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Bounds of one connection to the OTLP receivers. Every local user can
// connect to a loopback port, and the token is checked only once a
// request's headers (HTTP) or a call's whole message (gRPC) are read, so
// what an unauthenticated connection may cost is set here, not by the
// authenticator. The receiver's defaults (otlpreceiver v0.161.0) have no
// HTTP timeout at all and no gRPC idle or age limit. The job's clients are
// OpenTelemetry SDK exporters on the same node: each keeps one connection
// per signal, writes a request's headers in one write and its body right
// after, exports one batch at a time (the batch span processor every 5 s,
// the periodic metric reader every 60 s by default), and opens a new
// connection when the server closes an idle one (HTTP) or sends a GOAWAY
// (gRPC). None of the values below is reached by such a client in normal
// use.
const (
	// ReceiverReadHeaderTimeout bounds the wait for a request's headers
	// (HTTP), from the connection's accept or its first byte after an idle
	// wait: an attacker trickling header lines (the server keeps up to
	// 1 MiB of them, net/http's default, which the collector does not
	// change; about 1.4 MiB of the collector's memory each, measured)
	// holds them at most this long. An SDK writes its headers at once, in
	// microseconds on loopback.
	ReceiverReadHeaderTimeout = 10 * time.Second
	// ReceiverReadTimeout bounds reading a whole request, body included
	// (HTTP). Besides the job's exports (at most 20 MiB each, the
	// receiver's body limit, read in milliseconds on loopback) it bounds
	// the body net/http reads and drops after an answer (up to 256 KiB,
	// after a 401), which an attacker could otherwise trickle forever.
	ReceiverReadTimeout = 30 * time.Second
	// ReceiverIdleTimeout closes a kept-alive connection that sends no
	// next request (HTTP keepalive.idle_timeout), and ReceiverMaxConnIdle
	// a gRPC connection without a call in flight (a GOAWAY): 1.5 times
	// the SDK's default 60 s metric export interval, so an SDK's kept
	// connection is reused between exports.
	ReceiverIdleTimeout = 90 * time.Second
	ReceiverMaxConnIdle = 90 * time.Second
	// ReceiverMaxConnAge ends every gRPC connection after this long (gRPC
	// varies it by up to ±10 % per connection) with a GOAWAY, and ReceiverMaxConnAgeGrace then gives its calls in flight
	// this long before the connection is closed: an attacker's call that
	// never completes its message (the token is checked only once it is
	// whole) is held at most their sum. The SDK finishes its call (10 s
	// export timeout by default, a third of the grace) and opens a new
	// connection for its next one: one reconnect every 2 min.
	ReceiverMaxConnAge      = 2 * time.Minute
	ReceiverMaxConnAgeGrace = 30 * time.Second
	// ReceiverMaxConcurrentStreams caps the calls in flight on one gRPC
	// connection (the default is unlimited); each call holds up to one
	// message of ReceiverMaxRecvMsgMiB. An SDK has one call in flight per
	// signal, and a gRPC client queues calls past the cap rather than
	// failing them.
	ReceiverMaxConcurrentStreams = 16
	// ReceiverMaxRecvMsgMiB is the largest gRPC message, MiB: gRPC's own
	// default, written out so the per-connection bound reads in one place.
	ReceiverMaxRecvMsgMiB = 4
)

// Not set here, for want of a key: the number of connections (neither
// server caps it: each costs a descriptor while it lasts); net/http's
// 1 MiB of headers; gRPC's 120 s for a connection to send the HTTP/2
// preface (grpc.ConnectionTimeout's default, which configgrpc does not
// expose). An HTTP connection that sends a small request (answered 401)
// before each ReceiverIdleTimeout is held as long as it does so; it costs
// a descriptor and a few KiB of buffers.

// receivers: OTLP (gRPC and HTTP, each behind the per-job token and with
// the bounds of one connection above) and, when the job has scrape jobs,
// the Prometheus receiver; the plugin's own: OTLP/HTTP behind the plugin's
// token (with the same bounds) when Ports.Plugin is set.
func receivers(in Input, scrapes []omap) omap {
	auth := omap{{"authenticator", ReceiverAuth}}
	receivers := omap{
		{"otlp", omap{{"protocols", omap{
			{"grpc", omap{
				{"endpoint", loop(in.Ports.OTLPGRPC)},
				{"auth", auth},
				{"max_recv_msg_size_mib", ReceiverMaxRecvMsgMiB},
				{"max_concurrent_streams", ReceiverMaxConcurrentStreams},
				{"keepalive", omap{{"server_parameters", omap{
					{"max_connection_idle", ReceiverMaxConnIdle.String()},
					{"max_connection_age", ReceiverMaxConnAge.String()},
					{"max_connection_age_grace", ReceiverMaxConnAgeGrace.String()},
				}}}},
			}},
			{"http", omap{
				{"endpoint", loop(in.Ports.OTLPHTTP)},
				{"auth", auth},
				{"read_header_timeout", ReceiverReadHeaderTimeout.String()},
				{"read_timeout", ReceiverReadTimeout.String()},
				{"keepalive", omap{{"idle_timeout", ReceiverIdleTimeout.String()}}},
			}},
		}}}},
	}
	prom := func(scrapes []omap) omap {
		// discovery_reload_on_startup: the scrape pools start with the
		// receiver, not after the scrape manager's first 5 s reload tick,
		// so each target's first scrape comes within one interval of the
		// collector's start (at its hash offset) and every interval after.
		prom := omap{{"discovery_reload_on_startup", true}}
		if in.ScrapeOnShutdown {
			// Every scrape loop scrapes once more as it stops.
			prom = append(prom, kv{"scrape_on_shutdown", true})
		}
		return append(prom, kv{"config", omap{{"scrape_configs", scrapes}}})
	}
	if len(scrapes) > 0 {
		receivers = append(receivers, kv{"prometheus", prom(scrapes)})
	}
	if in.Ports.Plugin != 0 {
		// HTTP only: the supervisor posts protobuf to /v1/traces.
		receivers = append(receivers, kv{PluginReceiver, omap{{"protocols", omap{
			{"http", omap{
				{"endpoint", loop(in.Ports.Plugin)},
				{"auth", omap{{"authenticator", PluginAuth}}},
				{"read_header_timeout", ReceiverReadHeaderTimeout.String()},
				{"read_timeout", ReceiverReadTimeout.String()},
				{"keepalive", omap{{"idle_timeout", ReceiverIdleTimeout.String()}}},
			}},
		}}}})
	}
	return receivers
}

// processors returns the processors, the metrics pipeline's processor list
// and metrics/plugin's (the traces and logs pipelines use memory_limiter,
// resource/unsource and resource/identity only; traces/plugin
// memory_limiter, resource/source and resource/identity). scraping: the
// job has scrape jobs of its own.
func processors(in Input, scraping bool) (omap, []string, []string) {
	o := in.Resolved.Otel
	processors := omap{
		{"memory_limiter", omap{
			{"check_interval", "1s"},
			{"limit_mib", o.MemoryLimitMiB},
			{"spike_limit_mib", memory.Of(o.MemoryLimitMiB, 0).SpikeLimitMiB},
		}},
	}
	metricsProcs := []string{"memory_limiter", UnsourceProcessor}
	// The plugin's pipeline carries the supervisor's readings only, whose
	// names (helper/vocab) have no ":" and which are never stale: no
	// transform/names or filter/stale there.
	pluginMetricsProcs := []string{"memory_limiter", SourceProcessor, IdentityProcessor}
	if scraping {
		// A scrape that fails (a service killed at the job's end, before
		// the epilog's drain) makes the Prometheus receiver emit a
		// staleness marker for every series of the target: a point with
		// no value (flag no-recorded-value), which would be the series'
		// last point. Drop them: a series' last point is its last value;
		// up=0 still says the target stopped answering.
		processors = append(processors, kv{"filter/stale", omap{
			{"error_mode", "ignore"},
			{"metrics", omap{{"datapoint", []string{"flags == 1"}}}},
		}})
		metricsProcs = append(metricsProcs, "filter/stale")
	}
	if o.GPUMetricsPort != 0 {
		// The job's GPUs (gpus.go): drop the others' series, then say of
		// each series kept whether it is the job's alone.
		plan := planGPUs(in.Job.GPUs, in.Job.GPUDevices, in.Job.GPUPCI)
		if cond := plan.filter(); cond != "" {
			processors = append(processors, kv{"filter/dcgm", omap{
				{"error_mode", "ignore"},
				{"metrics", omap{{"datapoint", []string{cond}}}},
			}})
			metricsProcs = append(metricsProcs, "filter/dcgm")
		}
		processors = append(processors, kv{"transform/dcgm", omap{
			{"error_mode", "ignore"},
			{"metric_statements", []omap{{
				{"context", "datapoint"},
				{"statements", plan.marks()},
			}}},
		}})
		metricsProcs = append(metricsProcs, "transform/dcgm")
	}
	processors = append(processors,
		kv{"transform/names", omap{
			{"error_mode", "ignore"},
			{"metric_statements", []omap{{
				{"context", "metric"},
				{"statements", []string{`replace_pattern(metric.name, "^([A-Za-z_][A-Za-z0-9_]*):", "$${1}_")`}},
			}}},
		}},
	)
	if cond := nodeLocalFilter(in); cond != "" {
		// The node_exporter series the files keep (local_node_metrics):
		// the file pipeline's filter only; the backend gets every one.
		processors = append(processors, kv{NodeLocalFilter, omap{
			{"error_mode", "ignore"},
			{"metrics", omap{{"metric", []string{cond}}}},
		}})
	}
	// The source marker (contract.SourceKey): deleted from whatever the
	// job's pipelines receive, stamped by the plugin's pipelines.
	processors = append(processors, kv{UnsourceProcessor, omap{{"attributes", []omap{{
		{"key", contract.SourceKey},
		{"action", "delete"},
	}}}}})
	if in.Ports.Plugin != 0 {
		processors = append(processors, kv{SourceProcessor, omap{{"attributes", []omap{{
			{"key", contract.SourceKey},
			{"value", quoted(contract.SourceSlurm)},
			{"action", "upsert"},
		}}}}})
	}
	processors = append(processors, kv{IdentityProcessor, omap{{"attributes", identityActions(in)}}})
	if o.TokenResourceAttribute && o.CollectorDelivery() {
		// With delivery "files" the supervisor's sender adds it
		// (helper/delivery, Options.ResourceAttributes).
		processors = append(processors, kv{BackendAuth, omap{{"attributes", []omap{{
			{"key", "Authorization"},
			{"value", Bearer(o.TokenEnv)},
			{"action", "upsert"},
		}}}}})
	}
	// send_batch_max_size: a producer's request larger than a batch is
	// split, so that a request to the backend holds at most BatchMaxItems
	// items (sendingQueue).
	processors = append(processors, kv{"batch", omap{{"timeout", "1s"}, {"send_batch_size", BatchMaxItems}, {"send_batch_max_size", BatchMaxItems}}})
	metricsProcs = append(metricsProcs, "transform/names", IdentityProcessor)
	return processors, metricsProcs, pluginMetricsProcs
}

// SpanMetricsDimensions are the span_metrics connector's dimensions
// beyond its own (service.name, span.name, span.kind, status.code), in
// their order on its points: each the span's attribute, else its
// resource's, else none.
var SpanMetricsDimensions = []string{"service.name.override", "nemo.gym.sandbox.provider"}

// connectors: span_metrics, from the traces pipeline into the metrics one.
func connectors() omap {
	var dims []omap
	for _, d := range SpanMetricsDimensions {
		dims = append(dims, omap{{"name", d}})
	}
	return omap{{"span_metrics", omap{
		{"namespace", "traces.span.metrics"},
		{"metrics_flush_interval", timing.SpanMetricsFlush.String()},
		{"dimensions", dims},
		{"exclude_dimensions", []string{"collector.instance.id"}},
		{"histogram", omap{{"unit", "ms"}}},
	}}}
}

// exporters: a file exporter per signal (<output dir>/<signal>.jsonl, or
// under FilesAt) and
// the site's OTLP/HTTP backend.
func exporters(in Input) omap {
	o := in.Resolved.Otel
	dir := in.OutputDir
	if in.FilesAt != "" {
		dir = in.FilesAt
	}
	out := func(name string) string { return esc(filepath.Join(dir, name)) }
	exporters := omap{}
	for _, sig := range signals(o) {
		exporters = append(exporters, kv{FileExporter(sig), omap{
			{"path", out(jobdir.SignalFile(sig))},
			{"append", true},
			{"flush_interval", "1s"},
		}})
	}
	if !o.CollectorDelivery() {
		// The supervisor sends the files to the backend
		// (helper/delivery), or nothing is sent (delivery "none"): the
		// collector writes only the files.
		return exporters
	}
	exporters = append(exporters, kv{BackendExporter, omap{
		{"endpoint", esc(o.Endpoint)},
		{"headers", omap{{"Authorization", Bearer(o.TokenEnv)}}},
		{"timeout", fmt.Sprintf("%ds", o.ExportTimeoutSeconds)},
		// gzip as the exporter's default, at its fastest level: the
		// default level (6) made the export the largest part of the
		// collector's CPU after the scrape itself (tests/scale/node.sh).
		{"compression", "gzip"},
		{"compression_params", omap{{"level", 1}}},
		{"retry_on_failure", omap{
			{"enabled", true},
			{"initial_interval", "1s"},
			{"max_interval", fmt.Sprintf("%ds", o.ExportTimeoutSeconds)},
			{"max_elapsed_time", fmt.Sprintf("%ds", 6*o.ExportTimeoutSeconds)},
		}},
		{"sending_queue", sendingQueue()},
	}})
	return exporters
}

// ExportQueueRequests is the backend exporter's queue per signal, in
// requests, queued and in flight together; as many senders drain it, so
// every queued request is being sent or waiting for its next retry.
const ExportQueueRequests = 10

// BatchMaxItems is the most items the batch processor puts in one request
// (spans, metric points or log records): with ExportQueueRequests it
// bounds the backend exporter's queue.
const BatchMaxItems = 8192

// sendingQueue is the backend exporter's queue. The file exporters are fed
// synchronously, in the same call from the batch processor as this queue;
// the receivers' answer to a producer comes from the memory_limiter and the
// batch processor before that, so nothing the backend does may reach it:
//   - block_on_overflow false: a full queue drops the batch at once and
//     counts it (otelcol_exporter_enqueue_failed_*, the receipt's
//     enqueue_failed); blocking would stop the batch processor and with it
//     the files, and then the receivers.
//   - wait_for_result false: the batch processor does not wait for the
//     backend.
//   - ExportQueueRequests requests of at most BatchMaxItems items, as many
//     senders: memory is bounded (10 x 8192 items per signal; measured,
//     130-175 MiB anonymous for the whole collector at 20,000 spans/s with
//     the backend down, hung or throttling, where a queue of 256 requests
//     had reached 405 MiB, GOMEMLIMIT, within 40 s), so a backend that is
//     down, hung, slow or throttling never brings the heap to the
//     memory_limiter's limit, where the limiter would refuse the files'
//     data too (it sits ahead of both exporters). And the drain is bounded:
//     at shutdown every queued request is already in flight, so the queue
//     is empty after one last attempt (export_timeout_seconds), within
//     shutdown_timeout_seconds (which Validate keeps at or above one
//     export timeout per signal's exporter, shut down one after another:
//     config.Otel.MinShutdownSeconds), and the receipt has final figures. A queue
//     sized in bytes bounds memory too, but not the number of requests: at
//     a low rate the batches are small, a full queue holds hundreds, and
//     the drain takes one attempt per 10 of them (measured: a queue of 256
//     requests at 2,000 spans/s into a hung backend, killed at the bound
//     with 94,600 of 120,000 spans in no count; docs/performance.md).
//   - in memory, not the persistent queue of the file_storage extension:
//     the collector lives as long as the job, and a queue left on a node's
//     disk when the job ends would be sent by no one; what the backend
//     missed is in the files, counted in the receipt, and `replay` sends
//     it. A persistent queue also leaves unsent requests uncounted at
//     shutdown, where the memory queue counts them as failed.
func sendingQueue() omap {
	return omap{
		{"enabled", true},
		{"num_consumers", ExportQueueRequests},
		{"sizer", "requests"},
		{"queue_size", ExportQueueRequests},
		{"block_on_overflow", false},
		{"wait_for_result", false},
	}
}

// extensions: the health check, the job's receivers' token authenticator
// and, with Ports.Plugin, the plugin receiver's.
func extensions(in Input) omap {
	exts := omap{
		{"health_check", omap{{"endpoint", loop(in.Ports.Health)}}},
		{ReceiverAuth, omap{{"token", EnvRef(ReceiverTokenEnv)}}},
	}
	if in.Ports.Plugin != 0 {
		exts = append(exts, kv{PluginAuth, omap{{"token", EnvRef(PluginTokenEnv)}}})
	}
	return exts
}

// pipelines: traces, metrics and (with gym_logs) logs, each to its file
// and the backend; traces/plugin and metrics/plugin (with Ports.Plugin:
// the supervisor's phase spans and its readings of the node) to the same
// exporters; with
// token_resource_attribute the backend gets its own pipeline per
// pipeline, which adds the token as a resource attribute.
//
// The collector builds one exporter (and one connector) per id and signal,
// whatever the number of pipelines that name it: the job's pipeline and
// the plugin's of a signal write one file through one file exporter, and
// its counters count both.
func pipelines(in Input, scraping bool, metricsProcs, pluginMetricsProcs []string) omap {
	o := in.Resolved.Otel
	pipelines := omap{}
	// fileOnly are processors of the file's pipeline alone (the node
	// allowlist): with them the backend gets a pipeline of its own too.
	addPipeline := func(id, sig string, recv, procs, exps, fileOnly []string) {
		local := append(append([]string{}, exps...), FileExporter(sig))
		if !o.CollectorDelivery() {
			pipelines = append(pipelines, kv{id, pipeline(recv, append(append([]string{}, procs...), fileOnly...), local)})
			return
		}
		if !o.TokenResourceAttribute && len(fileOnly) == 0 {
			pipelines = append(pipelines, kv{id, pipeline(recv, procs, append(local, BackendExporter))})
			return
		}
		pipelines = append(pipelines, kv{id, pipeline(recv, append(append([]string{}, procs...), fileOnly...), local)})
		twin := sig + "/backend"
		if id != sig {
			twin = id + "_backend" // traces/plugin_backend
		}
		// The receiver hands each item to both pipelines and answers the
		// producer with either one's refusal, so the backend's pipeline
		// has no memory_limiter: it never refuses (its queue drops, see
		// sendingQueue), and only the file pipeline's limiter can turn a
		// producer away.
		backendProcs := withoutLimiter(procs)
		if o.TokenResourceAttribute {
			backendProcs = append(backendProcs, BackendAuth)
		}
		pipelines = append(pipelines, kv{twin, pipeline(recv, backendProcs, []string{BackendExporter})})
	}
	jobProcs := []string{"memory_limiter", UnsourceProcessor, IdentityProcessor}
	addPipeline("traces", "traces", []string{"otlp"}, jobProcs, []string{"span_metrics"}, nil)
	if in.Ports.Plugin != 0 {
		addPipeline(PluginPipeline("traces"), "traces", []string{PluginReceiver}, []string{"memory_limiter", SourceProcessor, IdentityProcessor}, []string{"span_metrics"}, nil)
	}
	metricsRecv := []string{"otlp", "span_metrics"}
	if scraping {
		metricsRecv = []string{"otlp", "prometheus", "span_metrics"}
	}
	var nodeLocal []string
	if scraping && nodeLocalFilter(in) != "" {
		nodeLocal = []string{NodeLocalFilter}
	}
	addPipeline("metrics", "metrics", metricsRecv, metricsProcs, nil, nodeLocal)
	if in.Ports.Plugin != 0 {
		addPipeline(PluginPipeline("metrics"), "metrics", []string{PluginReceiver}, pluginMetricsProcs, nil, nil)
	}
	if o.GymLogs {
		addPipeline("logs", "logs", []string{"otlp"}, jobProcs, nil, nil)
	}
	return pipelines
}

// telemetry: the collector's own logs, and its own metrics on the
// telemetry port (Prometheus, 127.0.0.1) when one was chosen.
func telemetry(in Input) omap {
	telemetry := omap{{"logs", omap{{"level", "info"}}}}
	if in.Ports.Telemetry != 0 {
		readers := []omap{{{"pull", omap{{"exporter", omap{{"prometheus", omap{
			{"host", "127.0.0.1"},
			{"port", in.Ports.Telemetry},
		}}}}}}}}
		if in.Ports.Final != 0 {
			// The meter provider shuts down after the pipelines and
			// extensions, and a periodic reader exports once more then.
			// Bounded (FinalExportTimeoutMillis): a sink that cannot be
			// reached must not hold the collector's shutdown.
			readers = append(readers, omap{{"periodic", omap{
				{"interval", FinalFlushIntervalMillis},
				{"timeout", FinalExportTimeoutMillis},
				{"exporter", omap{{"otlp", omap{
					{"protocol", "http/protobuf"},
					{"endpoint", fmt.Sprintf("http://127.0.0.1:%d/v1/metrics", in.Ports.Final)},
					{"compression", "none"},
					{"timeout", FinalExportTimeoutMillis},
					{"headers", []omap{{{"name", "Authorization"}, {"value", Bearer(PluginTokenEnv)}}}},
				}}}},
			}}})
		}
		telemetry = append(telemetry, kv{"metrics", omap{
			{"level", "normal"},
			{"readers", readers},
		}})
	} else {
		telemetry = append(telemetry, kv{"metrics", omap{{"level", "none"}}})
	}
	return telemetry
}

func check(in Input) error {
	var errs []error
	if in.Resolved == nil {
		return errors.New("render: no spec")
	}
	for name, p := range map[string]int{"otlp_grpc": in.Ports.OTLPGRPC, "otlp_http": in.Ports.OTLPHTTP, "health": in.Ports.Health} {
		if p < 1 || p > 65535 {
			errs = append(errs, fmt.Errorf("render: port %s is %d", name, p))
		}
	}
	if !filepath.IsAbs(in.OutputDir) {
		errs = append(errs, fmt.Errorf("render: output dir %q is not absolute", in.OutputDir))
	}
	if in.FilesAt != "" && !filepath.IsAbs(in.FilesAt) {
		errs = append(errs, fmt.Errorf("render: the files' dir %q is not absolute", in.FilesAt))
	}
	return errors.Join(errs...)
}

func header(in Input) string {
	if !in.Resolved.Otel.RemoteExport() {
		return fmt.Sprintf("# Collector configuration rendered by gym-otel-spank for job %s on %s.\n"+
			"# Needs OpenTelemetry Collector %s or newer with the components of otelcol-gym.\n"+
			"# Remote export is off (otel.delivery: none): the files only.\n"+
			"# Secrets are references: ${env:%s} (receiver token), ${env:%s} (plugin token).\n",
			oneLine(in.Job.JobID), oneLine(in.Job.Node), MinCollectorVersion, ReceiverTokenEnv, PluginTokenEnv)
	}
	if !in.Resolved.Otel.CollectorDelivery() {
		return fmt.Sprintf("# Collector configuration rendered by gym-otel-spank for job %s on %s.\n"+
			"# Needs OpenTelemetry Collector %s or newer with the components of otelcol-gym.\n"+
			"# The files only: the node's supervisor sends them to the backend (otel.delivery: files).\n"+
			"# Secrets are references: ${env:%s} (receiver token), ${env:%s} (plugin token).\n",
			oneLine(in.Job.JobID), oneLine(in.Job.Node), MinCollectorVersion, ReceiverTokenEnv, PluginTokenEnv)
	}
	return fmt.Sprintf("# Collector configuration rendered by gym-otel-spank for job %s on %s.\n"+
		"# Needs OpenTelemetry Collector %s or newer with the components of otelcol-gym.\n"+
		"# Secrets are references: ${env:%s} (backend token), ${env:%s} (receiver token), ${env:%s} (plugin token).\n",
		oneLine(in.Job.JobID), oneLine(in.Job.Node), MinCollectorVersion, in.Resolved.Otel.TokenEnv, ReceiverTokenEnv, PluginTokenEnv)
}

func oneLine(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

func signals(o config.Otel) []string {
	if o.GymLogs {
		return []string{"metrics", "traces", "logs"}
	}
	return []string{"metrics", "traces"}
}

// withoutLimiter returns procs without the memory_limiter.
// NodeLocalFilter is the processor of the metrics file's pipeline that
// drops the node_exporter scrape job's series outside local_node_metrics
// (and local_node_metrics_extra).
const NodeLocalFilter = "filter/node_local"

// nodeLocalFilter is NodeLocalFilter's condition: a metric of the
// node_exporter scrape job of this node (its resource's
// service.name.override "node" and service.instance.id its target) whose
// name matches none of the patterns, nor up or scrape_* (the scrape's own
// series); "" when there is nothing to filter (no node_exporter port, or
// local_node_metrics null).
func nodeLocalFilter(in Input) string {
	o := in.Resolved.Otel
	if o.NodeMetricsPort == 0 || o.LocalNodeMetrics == nil {
		return ""
	}
	keep := append([]string{"up", "scrape_.*"}, o.LocalNodeMetrics...)
	keep = append(keep, o.LocalNodeMetricsExtra...)
	instance := in.Job.Node + ":" + strconv.Itoa(o.NodeMetricsPort)
	return fmt.Sprintf(`resource.attributes["service.name.override"] == "node" and resource.attributes["service.instance.id"] == %s and not IsMatch(metric.name, %s)`,
		ottlString(instance), ottlString("^(?:"+strings.Join(keep, "|")+")$"))
}

func withoutLimiter(procs []string) []string {
	var out []string
	for _, p := range procs {
		if p != "memory_limiter" {
			out = append(out, p)
		}
	}
	return out
}

func pipeline(recv, procs, exps []string) omap {
	return omap{
		{"receivers", recv},
		{"processors", append(append([]string{}, procs...), "batch")},
		{"exporters", exps},
	}
}

func loop(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// Target is one Prometheus scrape target of a node's collector.
type Target struct {
	// Job is the scrape job's name, which the collector's resources carry
	// as service.name.override: <component>/<service>, "dcgm" or "node".
	Job string
	// Instance is the instance label, <node>:<port> (service.instance.id).
	Instance string
	// Port is the target's TCP port on the node's loopback.
	Port int
	// Service and Role are the Gym service and its role for an endpoint
	// that is not a vLLM engine (config.Service.Role: "router" for a
	// vllm_pd service's vllm-router, "ray" for a ray service's metrics
	// export port); the scrape job labels its series gym_service=<Service>
	// and role=<Role>. Both are "" otherwise.
	Service, Role string
}

// Targets returns the scrape targets of in's node, in the order of the
// rendered scrape jobs: the model services that run on this node, then
// dcgm and node when their ports are set.
func Targets(in Input) []Target {
	o := in.Resolved.Otel
	var ts []Target
	add := func(name string, port int) {
		ts = append(ts, Target{Job: name, Instance: in.Job.Node + ":" + strconv.Itoa(port), Port: port})
	}
	for _, s := range in.Resolved.Services {
		if s.RunsOn(in.Job.NodeIndex) {
			add(o.Component+"/"+s.Name, s.Port)
			if s.Role != "" {
				ts[len(ts)-1].Service, ts[len(ts)-1].Role = s.Name, s.Role
			}
		}
	}
	if o.GPUMetricsPort != 0 {
		add("dcgm", o.GPUMetricsPort)
	}
	if o.NodeMetricsPort != 0 {
		add("node", o.NodeMetricsPort)
	}
	return ts
}

// scrapeJobs returns the Prometheus scrape jobs of this node (Targets),
// one target each.
func scrapeJobs(in Input) []omap {
	interval := in.Resolved.Otel.ScrapeIntervalSeconds
	timeout := min(interval, 10)
	var jobs []omap
	for _, t := range Targets(in) {
		job := omap{
			{"job_name", esc(t.Job)},
			{"scrape_interval", fmt.Sprintf("%ds", interval)},
			{"scrape_timeout", fmt.Sprintf("%ds", timeout)},
			{"metrics_path", "/metrics"},
		}
		job = append(job, scrapeLimits(in.Resolved.Otel)...)
		labels := [][2]string{{"instance", t.Instance}}
		if t.Role != "" {
			labels = append(labels, [2]string{"gym_service", t.Service}, [2]string{"role", t.Role})
		}
		jobs = append(jobs, staticTarget(in, job, t.Job, t.Port, labels))
	}
	return jobs
}

// staticTarget completes scrape job job (named name) with its one static
// target, localhost:port with labels, and, when in.FirstScrape asks for
// it, the PhaseParam that brings its first scrape to in.FirstScrape.At
// (phase.go).
func staticTarget(in Input, job omap, name string, port int, labels [][2]string) omap {
	interval := in.Resolved.Otel.ScrapeIntervalSeconds
	addr := "localhost:" + strconv.Itoa(port)
	if fs := in.FirstScrape; fs != nil && !fs.At.IsZero() {
		v, _ := choosePhase(scrapeTarget{
			job:         name,
			interval:    time.Duration(interval) * time.Second,
			timeout:     time.Duration(min(interval, 10)) * time.Second,
			address:     addr,
			metricsPath: "/metrics",
			labels:      labels,
		}, *fs)
		job = append(job, kv{"params", omap{{PhaseParam, []string{v}}}})
	}
	ls := omap{}
	for _, l := range labels {
		ls = append(ls, kv{l[0], esc(l[1])})
	}
	return append(job, kv{"static_configs", []omap{{
		{"targets", []string{addr}},
		{"labels", ls},
	}}})
}

// identityActions are the resource processor's actions that stamp the run
// identity on every resource, in order: the producer's service.name kept as
// service.name.override (insert: only where the producer set none), the
// settings' service name and the seed's identity (upsert: always), Lens'
// keys (insert: a value a Lens-instrumented process set itself is kept,
// Lens' own rule that derived values never overwrite inherited ones).
// Strings stay strings (always double-quoted, "1234" too: slurm_job_id is
// never an Int, and a value reads the same whatever it holds, which the
// preview's placeholders rely on), Int attributes are YAML integers, and
// every string has its "$" escaped for the collector's configuration
// expansion.
//
// The resource processor, not a transform processor with OTTL statements:
// the collector parses each OTTL statement two or three times at start (its
// configuration's validation, the processor's build, the context prefix it
// adds), and the 17 statements per signal cost about 50 ms of the 0.15 s
// from the collector's exec to its health (docs/performance.md, P2).
func identityActions(in Input) []omap {
	acts := []omap{
		{{"key", "service.name.override"}, {"from_attribute", "service.name"}, {"action", "insert"}},
		{{"key", "service.name"}, {"value", quoted(esc(in.Resolved.Otel.ServiceName))}, {"action", "upsert"}},
	}
	value := func(a Attr) any {
		if a.Int {
			if n, err := strconv.ParseInt(a.Value, 10, 64); err == nil {
				return n
			}
		}
		return quoted(esc(a.Value))
	}
	for _, a := range runIdentity(in.Job) {
		acts = append(acts, omap{{"key", a.Key}, {"value", value(a)}, {"action", "upsert"}})
	}
	for _, a := range lensIdentity(in.Job) {
		acts = append(acts, omap{{"key", a.key}, {"value", value(Attr{Key: a.key, Value: a.val, Int: a.isInt})}, {"action", "insert"}})
	}
	return acts
}

// Attr is one resource attribute of the run's identity: a string, or an
// Int (Value in decimal) when Int is set.
type Attr struct {
	Key, Value string
	Int        bool
}

// runIdentity is the seed's identity of job j, in the order
// resource/identity sets it; empty values are left out.
func runIdentity(j Job) []Attr {
	var out []Attr
	for _, a := range []struct{ key, val string }{
		{"user", j.User},
		{"run_id", j.RunID},
		{"slurm_job_id", j.JobID},
		{"slurm_job_sluid", j.SLUID},
		{"benchmark", j.Benchmark},
		{"cluster", j.Cluster},
		{"model", j.Model},
		{"host.name", j.Node},
	} {
		if a.val != "" {
			out = append(out, Attr{Key: a.key, Value: a.val})
		}
		if a.key == "slurm_job_id" {
			if n, err := strconv.ParseUint(j.RestartCount, 10, 16); err == nil {
				out = append(out, Attr{Key: "slurm_job_restart_count", Value: strconv.FormatUint(n, 10), Int: true})
			}
		}
	}
	return out
}

// Identity is the resource a producer's resource becomes in the node's
// collector (resource/identity) when it carries only service.name
// (service): service.name.override=service, service.name=the settings'
// otel.service_name, the run's identity and Lens' keys. It is for spans
// the supervisor writes itself after the collector has exited (the drain
// and the epilog), so that they carry what the collector would have
// stamped on them.
func Identity(in Input, service string) []Attr {
	out := []Attr{{Key: "service.name", Value: in.Resolved.Otel.ServiceName}}
	if service != "" {
		out = append(out, Attr{Key: "service.name.override", Value: service})
	}
	out = append(out, runIdentity(in.Job)...)
	return append(out, LensAttrs(in.Job)...)
}

// ottlString quotes s as an OTTL string literal, with $ escaped for the
// collector's configuration expansion.
func ottlString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return esc(`"` + r.Replace(s) + `"`)
}

// esc is Escape, short for the many literals above.
func esc(s string) string { return Escape(s) }

type kv struct {
	k string
	v any
}

// omap is a YAML mapping that keeps its keys in order.
type omap []kv

// MarshalYAML implements yaml.Marshaler.
func (m omap) MarshalYAML() (any, error) { return m.node() }

// node is m as a YAML node. Mappings and sequences of mappings are built
// here, every other value by yaml.v3's Node.Encode (which encodes the value
// as text and parses it back): calling it on a nested omap would encode and
// parse every level again below it, which made one Render take about 10 ms.
func (m omap) node() (*yaml.Node, error) {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, e := range m {
		v, err := valueNode(e.v)
		if err != nil {
			return nil, err
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: e.k}, v)
	}
	return n, nil
}

// quoted is a string value written double-quoted.
type quoted string

// valueNode is one value of an omap as a YAML node.
func valueNode(v any) (*yaml.Node, error) {
	switch x := v.(type) {
	case quoted:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: string(x), Style: yaml.DoubleQuotedStyle}, nil
	case omap:
		return x.node()
	case []omap:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, m := range x {
			c, err := m.node()
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, c)
		}
		return n, nil
	}
	if n := scalarNode(v); n != nil {
		return n, nil
	}
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return &n, nil
}

// scalarNode is v as the node yaml.v3's Node.Encode makes of it, built
// directly for the scalars a configuration is mostly made of (a bool, an
// int, a string the encoder writes plain or quotes by its own rule, a list
// of such strings); nil for any other value, which Node.Encode then
// takes. Node.Encode starts an encoder and a parser for each value:
// about 10 KiB of allocations per leaf, most of a Render's time.
func scalarNode(v any) *yaml.Node {
	switch x := v.(type) {
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}
	case int:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(x)}
	case int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(x, 10)}
	case string:
		if !plainString(x) {
			return nil
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: x}
	case []string:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, e := range x {
			if !plainString(e) {
				return nil
			}
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: e})
		}
		return n
	}
	return nil
}

// plainString reports whether a string node of s encodes as Node.Encode's
// would: valid UTF-8 on one line, not one of YAML 1.1's booleans
// ("yes", "off", ...) nor the merge key "<<", and without a colon (a
// sexagesimal number such as "1:20"), which the encoder writes otherwise
// when it encodes a Go string than a node's value. Everything else it quotes by the same rule either way (a
// value that would read back as another type).
func plainString(s string) bool {
	if !utf8.ValidString(s) || strings.ContainsAny(s, "\n:") {
		return false
	}
	switch strings.ToLower(s) {
	case "y", "yes", "n", "no", "on", "off", "<<":
		return false
	}
	return true
}
