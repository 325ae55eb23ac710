package main

// P8: the job's files under a misbehaving backend, for minutes at a high
// span rate. For each backend behaviour (hung, refusing connections, 429
// and 503 with Retry-After, 2 s per request), the real collector through
// `gym-otel-spank supervise` with the site's defaults but delivery:
// collector (the collector's own exporter; delivery from the files is
// P10): what the producer
// was told (accepted, refused), what traces.jsonl and the backend hold,
// the receipt, and the collector's peak memory. The runs are
// helper/supervise's TestMeasureOutage (the CI test TestCollectorOutageKeepsFiles
// is its short form); the bench runs it and reads its summary lines. No
// Slurm.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// runP8 runs each backend behaviour for dur at rate spans/s.
func runP8(dur time.Duration, rate int) ([]Row, error) {
	secs := int(dur / time.Second)
	logf("P8: five backend behaviours, %d s each at %d spans/s (about %d min)", secs, rate, 5*(secs+60)/60)
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestMeasureOutage$", "-v",
		"-timeout", fmt.Sprintf("%ds", 5*(secs+600)), "./helper/supervise")
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
		if s, ok := testenv.ParseOutageLine(sc.Text()); ok {
			rows = append(rows, outageRow(s))
		}
	}
	if err != nil || len(rows) == 0 {
		return rows, fmt.Errorf("P8: go test -run TestMeasureOutage ./helper/supervise: %v\n%s", err, lastLines(out.String(), 40))
	}
	return rows, nil
}

// outageRow is one run as a line of the table: the figure holds what the
// producer was told, the files, the backend and the receipt; the spread
// the peak memory.
func outageRow(s testenv.OutageSummary) Row {
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
