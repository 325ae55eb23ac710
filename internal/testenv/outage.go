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
