package testenv

import (
	"encoding/json"
	"strings"
)

// OutageSummary is one run of helper/supervise's TestMeasureOutage (the
// job's files under a misbehaving backend) as `make bench` (tests/bench,
// P8) reads it: counts of spans, memory in MiB, durations in seconds. The
// test prints it with Line, the bench reads it with ParseOutageLine.
type OutageSummary struct {
	Kind          string   `json:"kind"`
	Rate          int      `json:"rate"`
	Seconds       int      `json:"seconds"`
	Accepted      int64    `json:"accepted"`
	Refused       int64    `json:"refused"`
	Stalled       bool     `json:"stalled"`
	Files         int64    `json:"files"`
	Backend       int64    `json:"backend"` // -1: no backend behind
	Basis         string   `json:"basis"`
	Received      int64    `json:"received"`
	Written       int64    `json:"written"`
	Sent          int64    `json:"sent"`
	SendFailed    int64    `json:"send_failed"`
	EnqueueFailed int64    `json:"enqueue_failed"`
	Unknown       []string `json:"unknown,omitempty"`
	PeakRSS       float64  `json:"peak_rss_mib"`
	PeakAnon      float64  `json:"peak_anon_mib"`
	MemoryLimit   int      `json:"memory_limit_mib"`
	Drain         float64  `json:"drain_seconds"`
	DrainErr      string   `json:"drain_error,omitempty"`
}

// outagePrefix starts the line of an OutageSummary in the test's output.
const outagePrefix = "outage-json: "

// Line is s as one line of the test's output: "outage-json: <JSON>".
func (s OutageSummary) Line() string {
	b, _ := json.Marshal(s)
	return outagePrefix + string(b)
}

// ParseOutageLine reads the OutageSummary of a Line found anywhere in
// line; ok is false for any other line.
func ParseOutageLine(line string) (s OutageSummary, ok bool) {
	_, js, found := strings.Cut(line, outagePrefix)
	if !found || json.Unmarshal([]byte(js), &s) != nil {
		return OutageSummary{}, false
	}
	return s, true
}

// FileOutageSummary is one run of helper/supervise's
// TestMeasureFileDeliveryOutage (delivery from the files: the backend
// stopped for an outage in the middle of a job, the supervisor catching
// up from the files) as `make bench` (tests/bench, P10) reads it: items
// (spans, metric points, log records) of the job's files and at the
// backend, seconds, MiB. The test prints it with Line, the bench reads it
// with ParseFileOutageLine.
type FileOutageSummary struct {
	// Kind is the backend's behaviour ("": stopped, P10's outage; else
	// one of P8's: hang, refuse, 429, 503, slow, through the whole job and
	// its drain).
	Kind          string `json:"kind,omitempty"`
	Rate          int    `json:"rate"`
	OutageSeconds int    `json:"outage_seconds"`
	JobSeconds    int    `json:"job_seconds"`
	Files         int64  `json:"files"`
	Backend       int64  `json:"backend"`
	// Missing counts the files' spans the backend lacks (by id);
	// DuplicatesBound is the receipt's bound of the items the backend may
	// hold twice, Extra what it holds beyond the files.
	Missing         int64 `json:"missing"`
	Extra           int64 `json:"extra"`
	DuplicatesBound int64 `json:"duplicates_bound"`
	// LateItems are the items the receipt counts as caught up late;
	// CatchUp is from the backend's return to the catch-up (-1: not caught
	// up before the drain), Lag from the first failed attempt.
	LateItems int64   `json:"late_items"`
	CatchUp   float64 `json:"catch_up_seconds"`
	Lag       float64 `json:"lag_seconds"`
	Complete  bool    `json:"complete"`
	// PeakSupervisor and PeakCollector are the processes' peak RSS;
	// MemoryLimit is the collector's memory_limit_mib.
	PeakSupervisor float64 `json:"peak_supervisor_mib"`
	PeakCollector  float64 `json:"peak_collector_mib"`
	MemoryLimit    int     `json:"memory_limit_mib"`
	Drain          float64 `json:"drain_seconds"`
	// BackendAfterJob is the backend's items once the job has ended
	// (before any replay); Replayed is whether one `replay` ran because
	// the outage outlasted the job (the backend back on the same
	// endpoint), ReplayItems the items it said it sends, ReplaySeconds
	// its duration from the backend's return. Backend is then the
	// backend's items after it, and DuplicatesBound the checkpoint's
	// bound after it (the job's and the replay's).
	BackendAfterJob int64   `json:"backend_after_job"`
	Replayed        bool    `json:"replayed,omitempty"`
	ReplayItems     int64   `json:"replay_items,omitempty"`
	ReplaySeconds   float64 `json:"replay_seconds,omitempty"`
	// Accepted and Refused are what the producer was told.
	Accepted int64 `json:"accepted,omitempty"`
	Refused  int64 `json:"refused,omitempty"`
}

// fileOutagePrefix starts the line of a FileOutageSummary.
const fileOutagePrefix = "file-outage-json: "

// Line is s as one line of the test's output: "file-outage-json: <JSON>".
func (s FileOutageSummary) Line() string {
	b, _ := json.Marshal(s)
	return fileOutagePrefix + string(b)
}

// ParseFileOutageLine reads the FileOutageSummary of a Line found
// anywhere in line; ok is false for any other line.
func ParseFileOutageLine(line string) (s FileOutageSummary, ok bool) {
	_, js, found := strings.Cut(line, fileOutagePrefix)
	if !found || json.Unmarshal([]byte(js), &s) != nil {
		return FileOutageSummary{}, false
	}
	return s, true
}
