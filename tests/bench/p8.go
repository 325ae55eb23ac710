package main

// P8: the job's files and the backend's copy under a misbehaving backend,
// for minutes at a high span rate. For each backend behaviour (hung,
// refusing connections, 429 and 503 with Retry-After, 2 s per request),
// the real collector through `gym-otel-spank supervise` with the site's
// defaults, twice:
//
//   - delivery: collector (the collector's own exporter): what the
//     producer was told (accepted, refused), what traces.jsonl and the
//     backend hold, the receipt, and the collector's peak memory. The runs
//     are helper/supervise's TestMeasureOutage (the CI test
//     TestCollectorOutageKeepsFiles is its short form).
//   - delivery: files (the default: the supervisor sends the files from
//     its checkpoint), the behaviour lasting through the job and its
//     drain: the files' items, the backend's after the job and after one
//     `replay` once a healthy backend is back on the same endpoint, the
//     duplicates against the checkpoint's bound, the replay's time, the
//     peak memory of the supervisor and the collector. The runs are
//     helper/supervise's TestMeasureFileDeliveryOutageKinds.
//
// The bench runs them and reads their summary lines. No Slurm. (An outage
// that ends while the job runs, caught up by the supervisor itself, is
// P10.)

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
	logf("P8: five backend behaviours with delivery from the collector, %d s each at %d spans/s (about %d min)", secs, rate, 5*(secs+60)/60)
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

	logf("P8: the same five behaviours with delivery from the files, %d s each and one replay (about %d min)", secs, 5*(secs+150)/60)
	cmd = exec.Command("go", "test", "-count=1", "-run", "^TestMeasureFileDeliveryOutageKinds$", "-v",
		"-timeout", fmt.Sprintf("%ds", 5*(secs+900)), "./helper/supervise")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GYM_OTEL_MEASURE=outage-files", "GYM_OTEL_REQUIRE_REAL=1",
		fmt.Sprintf("GYM_OTEL_MEASURE_SECONDS=%d", secs), fmt.Sprintf("GYM_OTEL_MEASURE_RATES=%d", rate))
	out.Reset()
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	n := 0
	seen := map[string]bool{} // the test prints each line twice (stdout and its log)
	sc = bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		if s, ok := testenv.ParseFileOutageLine(sc.Text()); ok && s.Kind != "" && !seen[s.Kind] {
			seen[s.Kind] = true
			rows = append(rows, fileKindRow(s))
			n++
		}
	}
	if n == 0 {
		return rows, fmt.Errorf("P8: go test -run TestMeasureFileDeliveryOutageKinds ./helper/supervise: %v\n%s", err, lastLines(out.String(), 40))
	}
	if err != nil {
		// A kind whose backend lacks items after the replay fails the
		// test: its row says so; the others stand.
		logf("P8: TestMeasureFileDeliveryOutageKinds: %v\n%s", err, lastLines(out.String(), 40))
	}
	return rows, nil
}

// fileKindRow is one run with delivery from the files as a line of the
// table: the files' items, the backend's after the job and after the
// replay, duplicates against the bound; the spread the peak memory.
func fileKindRow(s testenv.FileOutageSummary) Row {
	after := "complete at the drain, no replay"
	if s.Replayed {
		after = fmt.Sprintf("after one replay %d (it sent %d items in %.1f s from the backend's return)", s.Backend, s.ReplayItems, s.ReplaySeconds)
	}
	fig := fmt.Sprintf("producer accepted %d refused %d; files %d items; backend after the job %d, %s; %d spans missing, %d extra (bound %d); drain %.1f s",
		s.Accepted, s.Refused, s.Files, s.BackendAfterJob, after, s.Missing, s.Extra, s.DuplicatesBound, s.Drain)
	ok := s.Refused == 0 && s.Files > 0 && s.Missing == 0 && s.Backend >= s.Files && s.Extra <= s.DuplicatesBound &&
		s.PeakCollector < float64(s.MemoryLimit)
	return Row{
		ID:     "P8",
		What:   fmt.Sprintf("backend %s, delivery files, %d spans/s for %d s", s.Kind, s.Rate, s.JobSeconds),
		Figure: fig,
		Spread: fmt.Sprintf("peak RSS supervisor %.0f MiB, collector %.0f MiB", s.PeakSupervisor, s.PeakCollector),
		Target: fmt.Sprintf("backend holds every item of the files (after one replay where the outage outlasted the job), extra within the bound, collector < %d MiB", s.MemoryLimit),
		Met:    met(ok),
	}
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
		What:   fmt.Sprintf("backend %s, delivery collector, %d spans/s for %d s", s.Kind, s.Rate, s.Seconds),
		Figure: fig,
		Spread: fmt.Sprintf("peak RSS %.0f MiB (anon %.0f)", s.PeakRSS, s.PeakAnon),
		Target: fmt.Sprintf("refused 0, files = accepted, receipt final and balanced, anon < %d MiB", s.MemoryLimit),
		Met:    met(ok),
	}
}
