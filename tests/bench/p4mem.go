package main

// P4's breakdown: what an idle collector's memory is made of. The runs are
// helper/supervise's TestMeasureMemory: the collector of a job scraping a
// vLLM stand-in and node_exporter every 5 s, first as the supervisor runs
// it, then by hand on the configuration the supervisor rendered, one
// variant at a time (without the receipt's periodic reader, the file
// exporters, the span metrics connector; other GOGC values), interleaved
// over rounds with an A-against-A control. No Slurm.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// runP4Memory runs TestMeasureMemory for rounds rounds of window seconds
// per run and returns one row per variant: the median over the rounds of
// each run's median VmRSS, PSS, RssFile and RssAnon, and the difference
// from the configuration as rendered.
func runP4Memory(rounds, window int) ([]Row, error) {
	logf("P4 breakdown: the collector's idle memory by configuration and runtime setting, %d rounds of %d s runs", rounds, window)
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestMeasureMemory$", "-v", "-timeout", "60m", "./helper/supervise")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GYM_OTEL_MEASURE=memory", "GYM_OTEL_REQUIRE_REAL=1",
		fmt.Sprintf("GYM_OTEL_MEASURE_ROUNDS=%d", rounds), fmt.Sprintf("GYM_OTEL_MEASURE_SECONDS=%d", window))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	type agg struct {
		name                     string
		size                     float64
		rss, pss, file, anon, mx []float64
	}
	var order []string
	by := map[string]*agg{}
	primary := "" // the binary the supervisor ran: the other rows name theirs
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		s, ok := testenv.ParseMemoryLine(sc.Text())
		if !ok {
			continue
		}
		if primary == "" {
			primary = s.Binary
		}
		key := s.Variant
		if s.Binary != primary {
			key = s.Binary + ": " + s.Variant
		}
		a := by[key]
		if a == nil {
			a = &agg{name: key, size: s.Size}
			by[key] = a
			order = append(order, key)
		}
		a.rss, a.pss, a.file, a.anon = append(a.rss, s.RSS), append(a.pss, s.PSS), append(a.file, s.File), append(a.anon, s.Anon)
		a.mx = append(a.mx, s.MaxRSS)
	}
	if err != nil || len(order) == 0 {
		return nil, fmt.Errorf("P4 breakdown: go test -run TestMeasureMemory ./helper/supervise: %v\n%s", err, lastLines(out.String(), 40))
	}
	base := by["as rendered"]
	var rows []Row
	for _, k := range order {
		a := by[k]
		fig := fmt.Sprintf("VmRSS %.1f MiB (PSS %.1f, file %.1f, anon %.1f)", median(a.rss), median(a.pss), median(a.file), median(a.anon))
		if base != nil && a != base {
			fig += fmt.Sprintf("; vs as rendered: %+.1f (file %+.1f, anon %+.1f)", median(a.rss)-median(base.rss),
				median(a.file)-median(base.file), median(a.anon)-median(base.anon))
		}
		lo, hi := minmax(a.rss)
		_, peak := minmax(a.mx)
		rows = append(rows, Row{
			ID:     "P4",
			What:   fmt.Sprintf("idle collector, %s (binary %.0f MiB)", k, a.size),
			Figure: fig,
			Spread: fmt.Sprintf("run medians %.1f-%.1f MiB over %d runs, highest sample %.1f MiB", lo, hi, len(a.rss), peak),
			Target: "report", Met: "-",
		})
	}
	return rows, nil
}
