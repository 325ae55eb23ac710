// Package timing is the timing policy of a job's telemetry lifecycle on a
// node: the bounds that follow from the otel: block and the node's bounds
// (Policy: the batch step's final-scrape wait, the collector's health
// wait, the prolog's wait for the supervisor's report, the collector's
// stop, the epilog's wait for the drain, the prolog and epilog
// deadlines), computed once and carried to every consumer, and the fixed
// bounds several packages share (the span-metrics flush, the delivery of
// the appended lines, the Slurm queries, a failed start's stop, the kill
// of a group, the epilog's reserves). The cap the C front reads too (the
// final wait's) is helper/contract's MaxFinalWait; the bounds of one
// protocol stay with it (the control socket's in helper/contract and
// helper/launch, the token socket's and the peers' in helper/supervise).
package timing

import (
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
)

const (
	// SpanMetricsFlush is the span_metrics connector's flush interval
	// (metrics_flush_interval in the rendered configuration).
	SpanMetricsFlush = 2 * time.Second
	// ReportSlack is the time the prolog allows the supervisor beyond the
	// collector's health wait, for its own start (ports, the collector's
	// configuration, its version check).
	ReportSlack = 5 * time.Second
	// SupervisorSlack is the time the epilog allows the supervisor beyond
	// the span metrics' share (SpanMetricsSettle) and the collector's
	// stop, for its reads of the collector's own telemetry and its state
	// file.
	SupervisorSlack = 5 * time.Second
	// DeliveryBound bounds the supervisor's delivery to the backend of the
	// line it appends after the collector's exit (the drain's and the
	// epilog's spans): one request per line without retries
	// (delivery.Once). It is taken out of SupervisorSlack, so DrainWait
	// and the epilog's bounds are unchanged.
	DeliveryBound = 2 * time.Second
	// SlurmMargin is kept free below Slurm's PrologTimeout/EpilogTimeout
	// (or PrologEpilogTimeout) for slurmd's own work around the script.
	SlurmMargin = 5 * time.Second
	// KillReserve is kept free at the end of the prolog to kill a failed
	// start (the supervisor's cgroup, bounded by GroupKillBound) and write
	// the record.
	KillReserve = 6 * time.Second
	// FailedStartStop bounds the stop (SIGTERM, then SIGKILL) of a
	// collector run the supervisor gives up on before it was taken into
	// service (the first start, a restart, the final scrape's new run):
	// unhealthy, its ports not proven its own, or the wrong version.
	// Nothing of the job's reached it, so it is not given the drain's time.
	FailedStartStop = 2 * time.Second
	// GroupKillBound bounds the kill of what is left in the job's cgroup.
	GroupKillBound = 5 * time.Second
	// RemoveReserve is kept free at the end of the epilog, after the
	// group's kill, to remove the group on every hierarchy (up to seven;
	// each rmdir retried while a dying task keeps it busy) and the record.
	RemoveReserve = time.Second
	// EpilogSweepBound bounds the epilog's sweep of orphaned cgroups (left
	// by an earlier epilog that ran out of time), taken only from what the
	// epilog's own job left of its deadline.
	EpilogSweepBound = 2 * time.Second
	// QueryBound bounds one Slurm query from the prolog.
	QueryBound = 5 * time.Second
	// LivenessQueryBound bounds one Slurm query of the supervisor's
	// liveness check (is the job still running?). It keeps no deadline,
	// and no answer changes nothing, so it waits longer than QueryBound for
	// a loaded controller.
	LivenessQueryBound = 10 * time.Second
)

// Bounds are what a node's prolog knows beyond the otel: block: the
// plugstack's prolog_timeout and Slurm's own timeouts for the job prolog
// and epilog (0: none known).
type Bounds struct {
	PrologTimeout time.Duration
	SlurmProlog   time.Duration
	SlurmEpilog   time.Duration
}

// Policy is every bound of one job's telemetry on one node. Durations;
// the record carries FinalWait and EpilogDrainWait in whole seconds.
type Policy struct {
	// FinalWait is the batch step's final-scrape wait in task_exit: one
	// scrape interval and a second, at most contract.MaxFinalWait.
	FinalWait time.Duration
	// HealthWait is how long the supervisor waits for the collector to be
	// healthy (otel.health_check_timeout_seconds).
	HealthWait time.Duration
	// ReportWait is how long the prolog waits for the supervisor's report:
	// HealthWait plus ReportSlack (and never past the prolog's deadline,
	// Deadline of its Bounds, less KillReserve, which the prolog applies as
	// it goes).
	ReportWait time.Duration
	// SpanMetricsFlush is the span_metrics connector's flush interval.
	SpanMetricsFlush time.Duration
	// SpanMetricsSettle is the drain's share of DrainWait for the span
	// metrics of the last spans. The connector flushes a new series as 0
	// first and with its count one interval later, and nothing at the
	// collector's shutdown; the drain does not wait for it: after the
	// collector's exit the supervisor reads traces.jsonl and metrics.jsonl
	// and appends what the connector did not export (well within this
	// share: supervise.SpanCountMaxBytes). Only files too large to read
	// make the drain wait this long after the last spans (the job's, and
	// the supervisor's own phase spans, sent at the drain too) before
	// stopping the collector: two intervals and a second.
	SpanMetricsSettle time.Duration
	// CollectorStop bounds the collector's clean shutdown
	// (otel.shutdown_timeout_seconds); past it the collector is killed.
	CollectorStop time.Duration
	// DrainWait is how long the epilog waits for the supervisor after its
	// SIGTERM: CollectorStop + SpanMetricsSettle + SupervisorSlack, and
	// never more than EpilogDeadline less GroupKillBound and RemoveReserve
	// (the epilog clamps it again to the time it has left).
	DrainWait time.Duration
	// EpilogDeadline is the total time the job epilog may take on this
	// node (Deadline: prolog_timeout, and never more than Slurm's
	// EpilogTimeout less SlurmMargin), which bounds DrainWait; 0 when no
	// Bounds were given. (The prolog's and the epilog's own deadlines are
	// Deadline of the same Bounds, taken as they start.)
	EpilogDeadline time.Duration
}

// For computes the policy for the otel: block o on a node with bounds b
// (the zero Bounds where the node's are not known, as in the supervisor:
// the deadlines are then 0 and DrainWait is not clamped).
func For(o config.Otel, b Bounds) Policy {
	p := Policy{
		FinalWait:         min(time.Duration(o.ScrapeIntervalSeconds+1)*time.Second, contract.MaxFinalWait),
		HealthWait:        time.Duration(o.HealthCheckTimeoutSeconds) * time.Second,
		SpanMetricsFlush:  SpanMetricsFlush,
		SpanMetricsSettle: 2*SpanMetricsFlush + time.Second,
		CollectorStop:     time.Duration(o.ShutdownTimeoutSeconds) * time.Second,
	}
	p.ReportWait = p.HealthWait + ReportSlack
	p.DrainWait = p.CollectorStop + p.SpanMetricsSettle + SupervisorSlack
	if b.PrologTimeout > 0 {
		p.EpilogDeadline = Deadline(b.PrologTimeout, b.SlurmEpilog)
		p.DrainWait = max(time.Second, min(p.DrainWait, p.EpilogDeadline-GroupKillBound-RemoveReserve))
	}
	return p
}

// Deadline is the plugin's deadline for a script Slurm bounds by
// slurmBound (0: none): prolog_timeout, never more than slurmBound less
// SlurmMargin, and at least a second.
func Deadline(prologTimeout, slurmBound time.Duration) time.Duration {
	d := prologTimeout
	if slurmBound > 0 {
		d = min(d, slurmBound-SlurmMargin)
	}
	return max(d, time.Second)
}

// Seconds is d in whole seconds, rounded down (the record's unit).
func Seconds(d time.Duration) int { return int(d / time.Second) }
