// Package supervise runs one job's collector on one node: it chooses
// loopback ports, writes collector.yaml, starts the collector as the job's
// user, gates on its health check, reports ready or failed once, restarts it
// if it dies mid-job, notices when the job is gone, and drains it on SIGTERM.
// `gym-otel-spank supervise` is this package's command; the SPANK plugin's
// prolog starts it and its epilog stops it.
package supervise
