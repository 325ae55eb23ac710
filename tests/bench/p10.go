package main

// P10: the backend's copy of a run through a long outage, with delivery
// from the files (the default). A job at 2,000 spans/s whose backend is
// stopped for 10 minutes in its middle (GYM_OTEL_BENCH_LONG_OUTAGE=1 adds
// a 1-hour outage) and started again: the supervisor catches up from the
// files by itself. The row reports the backend's items after the job
// against the files', the catch-up time after the backend's return, the
// duplicates against the receipt's bound and the peak memory of the
// supervisor and the collector. The runs are helper/supervise's
// TestMeasureFileDeliveryOutage (the CI tests TestFileDeliveryOutageMidJob
// and TestFileDeliveryBackendDownPastEnd are its short forms); the bench
// reads its summary line. No Slurm.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// runP10 runs one outage of each length in outages (seconds) at rate
// spans/s.
func runP10(outages []int, rate int) ([]Row, error) {
	var rows []Row
	for _, secs := range outages {
		job := 10 + secs*6/5 + 30
		logf("P10: delivery from the files through a %d s outage, %d spans/s (about %d min)", secs, rate, (job+120)/60)
		cmd := exec.Command("go", "test", "-count=1", "-run", "^TestMeasureFileDeliveryOutage$", "-v",
			"-timeout", fmt.Sprintf("%ds", job+900), "./helper/supervise")
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GYM_OTEL_MEASURE=fileoutage", "GYM_OTEL_REQUIRE_REAL=1",
			fmt.Sprintf("GYM_OTEL_MEASURE_OUTAGE_SECONDS=%d", secs), fmt.Sprintf("GYM_OTEL_MEASURE_RATE=%d", rate))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var found bool
		sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
		sc.Buffer(make([]byte, 1<<16), 1<<22)
		for sc.Scan() {
			if s, ok := testenv.ParseFileOutageLine(sc.Text()); ok && !found {
				rows = append(rows, fileOutageRow(s))
				found = true
			}
		}
		if err != nil || !found {
			return rows, fmt.Errorf("P10: go test -run TestMeasureFileDeliveryOutage ./helper/supervise (outage %d s): %v\n%s", secs, err, lastLines(out.String(), 40))
		}
	}
	return rows, nil
}

// fileOutageRow is one run as a line of the table.
func fileOutageRow(s testenv.FileOutageSummary) Row {
	catchUp := "NOT caught up before the drain"
	if s.CatchUp >= 0 {
		catchUp = fmt.Sprintf("caught up %.0f s after the backend's return (%d items late, lag %.0f s)", s.CatchUp, s.LateItems, s.Lag)
	}
	fig := fmt.Sprintf("files %d items, backend %d (%d spans missing, %d extra, receipt's duplicates bound %d); %s; drain %.1f s",
		s.Files, s.Backend, s.Missing, s.Extra, s.DuplicatesBound, catchUp, s.Drain)
	ok := s.Complete && s.Missing == 0 && s.Backend >= s.Files && s.Extra <= s.DuplicatesBound && s.CatchUp >= 0 &&
		s.PeakCollector < float64(s.MemoryLimit)
	return Row{
		ID:     "P10",
		What:   fmt.Sprintf("delivery from the files, backend down %d s of a %d s job at %d spans/s", s.OutageSeconds, s.JobSeconds, s.Rate),
		Figure: fig,
		Spread: fmt.Sprintf("peak RSS supervisor %.0f MiB, collector %.0f MiB", s.PeakSupervisor, s.PeakCollector),
		Target: fmt.Sprintf("backend holds every item of the files, extra within the bound, caught up before the job's end, collector < %d MiB", s.MemoryLimit),
		Met:    met(ok),
	}
}
