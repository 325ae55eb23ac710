// Package inspect reads the OTLP-JSON lines a job's collectors wrote
// (<job dir>/otel/{metrics,traces,logs}.jsonl on the first node,
// otel/nodes/<node>/ on the others, otel/links/<job id>/ for later links of
// a chain) and answers how the run went, without backend access: identity
// and time span, the job's Slurm phases per node and the time from its
// submit to its first rollout, rollouts and verify, the model servers,
// GPUs, CPU and memory per node, the job's cgroups per node, spans,
// errors, and the telemetry's own health.
//
// The files are streamed (stream.go) into bounded per-series state
// (aggregate.go, model.go): counters as totals and rates with resets,
// gauges as statistics and thinned time series, histograms as bucket
// increases whose quantiles are computed as Prometheus' histogram_quantile
// does (quantile.go). build.go reads a job dir into a Report (the schema
// of `inspect --json`, schema.go), one file per section turning that state
// into figures (gym.go, servers.go, hardware.go, spans.go, energy.go,
// phases.go, cgroups.go, absent.go; figures.go the quantiles); text.go,
// phasetext.go and html.go render it.
package inspect

// identityKeys are the resource attributes the report lists as the run's
// identity.
var identityKeys = []string{"service.name", "user", "run_id", "slurm_job_id", "slurm_job_restart_count", "slurm_job_sluid", "benchmark", "cluster", "model", "host.name"}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
