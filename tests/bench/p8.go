package main

// P8: the job's files under a misbehaving backend, for minutes at a high
// span rate. For each backend behaviour (hung, refusing connections, 429
// and 503 with Retry-After, 2 s per request), the real collector through
// `gym-otel-spank supervise` with the site's defaults: what the producer
// was told (accepted, refused), what traces.jsonl and the backend hold,
// the receipt, and the collector's peak memory. The runs are
// helper/lifecycle's TestMeasureOutage (the CI test TestOutageKeepsFiles
// is its short form); the bench runs it and reads its summary lines. No
// Slurm.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// outageSummary mirrors helper/lifecycle's OutageSummary.
type outageSummary struct {
	Kind          string   `json:"kind"`
	Rate          int      `json:"rate"`
	Seconds       int      `json:"seconds"`
	Accepted      int64    `json:"accepted"`
	Refused       int64    `json:"refused"`
	Stalled       bool     `json:"stalled"`
	Files         int64    `json:"files"`
	Backend       int64    `json:"backend"`
	Basis         string   `json:"basis"`
	Received      int64    `json:"received"`
	Written       int64    `json:"written"`
	Sent          int64    `json:"sent"`
	SendFailed    int64    `json:"send_failed"`
	EnqueueFailed int64    `json:"enqueue_failed"`
	Unknown       []string `json:"unknown"`
	PeakRSS       float64  `json:"peak_rss_mib"`
	PeakAnon      float64  `json:"peak_anon_mib"`
	MemoryLimit   int      `json:"memory_limit_mib"`
	Drain         float64  `json:"drain_seconds"`
	DrainErr      string   `json:"drain_error"`
}

// runP8 runs each backend behaviour for dur at rate spans/s.
func runP8(dur time.Duration, rate int) ([]Row, error) {
	secs := int(dur / time.Second)
	logf("P8: five backend behaviours, %d s each at %d spans/s (about %d min)", secs, rate, 5*(secs+60)/60)
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestMeasureOutage$", "-v",
		"-timeout", fmt.Sprintf("%ds", 5*(secs+600)), "./helper/lifecycle")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GYM_OTEL_MEASURE=outage", "GYM_OTEL_REQUIRE_REAL=1",
		fmt.Sprintf("GYM_OTEL_MEASURE_SECONDS=%d", secs), fmt.Sprintf("GYM_OTEL_MEASURE_RATES=%d", rate))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var rows []Row
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		_, js, ok := strings.Cut(sc.Text(), "outage-json: ")
		if !ok {
			continue
		}
		var s outageSummary
		if json.Unmarshal([]byte(js), &s) != nil {
			continue
		}
		rows = append(rows, s.row())
	}
	if err != nil || len(rows) == 0 {
		return rows, fmt.Errorf("P8: go test -run TestMeasureOutage ./helper/lifecycle: %v\n%s", err, lastLines(out.String(), 40))
	}
	return rows, nil
}

// row is one run as a line of the table: the figure holds what the
// producer was told, the files, the backend and the receipt; the spread
// the peak memory.
func (s outageSummary) row() Row {
	be := "none behind"
	if s.Backend >= 0 {
		be = fmt.Sprint(s.Backend)
	}
	producer := fmt.Sprintf("accepted %d refused %d", s.Accepted, s.Refused)
	if s.Stalled {
		producer = "STALLED"
	}
	fig := fmt.Sprintf("%s; traces.jsonl %d; backend %s; receipt %s: written %d sent %d failed %d dropped %d; drain %.1f s",
		producer, s.Files, be, s.Basis, s.Written, s.Sent, s.SendFailed, s.EnqueueFailed, s.Drain)
	ok := !s.Stalled && s.Refused == 0 && s.Accepted > 0 && s.Files >= s.Accepted && s.Basis == "final" &&
		s.Written == s.Files && s.Sent+s.SendFailed+s.EnqueueFailed == s.Written && s.PeakAnon < float64(s.MemoryLimit) && s.DrainErr == ""
	return Row{
		ID:     "P8",
		What:   fmt.Sprintf("backend %s, %d spans/s for %d s", s.Kind, s.Rate, s.Seconds),
		Figure: fig,
		Spread: fmt.Sprintf("peak RSS %.0f MiB (anon %.0f)", s.PeakRSS, s.PeakAnon),
		Target: fmt.Sprintf("refused 0, files = accepted, receipt final and balanced, anon < %d MiB", s.MemoryLimit),
		Met:    met(ok),
	}
}
