package config

import "fmt"

// ShutdownSlackSeconds is what the collector's clean shutdown needs beyond
// the backend exporters' last requests, in seconds: the batch processors'
// last flush, the file exporters' close, and the final read of the
// collector's own counters for the receipt (bounded at 2 s).
const ShutdownSlackSeconds = 5

// BackendExporters is how many backend exporters the collector runs: one
// per signal (traces, metrics, and logs with gym_logs).
func (o Otel) BackendExporters() int {
	if o.GymLogs {
		return 3
	}
	return 2
}

// MinShutdownSeconds is the least shutdown_timeout_seconds that holds a
// clean shutdown with the backend hung or gone: the collector shuts its
// backend exporters down one after another, and each waits up to
// export_timeout_seconds for the requests it still has in flight, so
// export_timeout_seconds × BackendExporters + ShutdownSlackSeconds. A
// shorter bound kills the collector before its last counts, and the
// receipt then has only lower bounds.
func (o Otel) MinShutdownSeconds() int {
	return o.ExportTimeoutSeconds*o.BackendExporters() + ShutdownSlackSeconds
}

// checkShutdown refuses a shutdown bound that cannot hold the backend
// exporters' last requests, naming both keys (and gym_logs, which adds an
// exporter).
func (o Otel) checkShutdown() error {
	need := o.MinShutdownSeconds()
	if o.ShutdownTimeoutSeconds >= need {
		return nil
	}
	sigs := "traces, metrics"
	if o.GymLogs {
		sigs += ", logs"
	}
	fix := fmt.Sprintf("set otel.shutdown_timeout_seconds to at least %d", need)
	if most := (o.ShutdownTimeoutSeconds - ShutdownSlackSeconds) / o.BackendExporters(); most >= 1 {
		fix += fmt.Sprintf(", or otel.export_timeout_seconds to at most %d", most)
	}
	return fmt.Errorf("otel.shutdown_timeout_seconds: %d is too short for otel.export_timeout_seconds %d: with the backend hung or gone, the collector's %d backend exporters (%s; otel.gym_logs adds logs) shut down one after another, each waiting up to otel.export_timeout_seconds for its last requests, so a clean shutdown needs %d × %d + %d = %d s; a shorter bound kills the collector and its receipt has only lower bounds: %s",
		o.ShutdownTimeoutSeconds, o.ExportTimeoutSeconds, o.BackendExporters(), sigs,
		o.ExportTimeoutSeconds, o.BackendExporters(), ShutdownSlackSeconds, need, fix)
}
