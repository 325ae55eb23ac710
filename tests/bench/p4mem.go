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
// each run's median PSS, RssAnon, its memory group's charge, VmRSS and
// RssFile, and the difference from the configuration as rendered.
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
		name                            string
		size                            float64
		rss, pss, file, anon, mx, group []float64
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
		if s.Group > 0 {
			a.group = append(a.group, s.Group)
		}
	}
	if err != nil || len(order) == 0 {
		return nil, fmt.Errorf("P4 breakdown: go test -run TestMeasureMemory ./helper/supervise: %v\n%s", err, lastLines(out.String(), 40))
	}
	base := by["as rendered"]
	var rows []Row
	for _, k := range order {
		a := by[k]
		// The headline is what the node pays: PSS and anonymous memory,
		// and the charge of the run's own memory group; VmRSS beside.
		group := "no group"
		if len(a.group) > 0 {
			group = fmt.Sprintf("group %.1f", median(a.group))
		}
		fig := fmt.Sprintf("PSS %.1f MiB, anon %.1f, %s (VmRSS %.1f, file %.1f)", median(a.pss), median(a.anon), group, median(a.rss), median(a.file))
		if base != nil && a != base {
			fig += fmt.Sprintf("; vs as rendered: PSS %+.1f, anon %+.1f", median(a.pss)-median(base.pss), median(a.anon)-median(base.anon))
			if len(a.group) > 0 && len(base.group) > 0 {
				fig += fmt.Sprintf(", group %+.1f", median(a.group)-median(base.group))
			}
			fig += fmt.Sprintf(" (VmRSS %+.1f, file %+.1f)", median(a.rss)-median(base.rss), median(a.file)-median(base.file))
		}
		lo, hi := minmax(a.pss)
		_, peak := minmax(a.mx)
		rows = append(rows, Row{
			ID:     "P4",
			What:   fmt.Sprintf("idle collector, %s (binary %.0f MiB)", k, a.size),
			Figure: fig,
			Spread: fmt.Sprintf("PSS run medians %.1f-%.1f MiB over %d runs, highest VmRSS sample %.1f MiB", lo, hi, len(a.pss), peak),
			Target: "report", Met: "-",
		})
	}
	return rows, nil
}
