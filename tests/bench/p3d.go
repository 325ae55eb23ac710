package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// deliveredRE is the supervisor's log line of its delivery of the lines it
// appends after the collector's exit (helper/supervise, deliver): the
// attempt's ms and the peak RSS of the collector that sent them (the
// drain's second collector, replay.Send).
var deliveredRE = regexp.MustCompile(`the appended lines \((\d+)\) delivered to the backend \S+ in (\d+) ms \(the delivering collector's peak RSS ([0-9.]+) MiB\)`)

// runP3D runs n one-node --gym-otel jobs of a short script one after the
// other and reads, in each job's supervisor.log, what the drain's second
// collector cost: the delivery's ms (the supervisor exits after it, and
// the job's epilog waits for the supervisor: it is part of the job's end)
// and that collector's peak RSS (ru_maxrss). Only otel.delivery:
// collector starts that collector (the default delivery from the files
// sends the appended lines with the files' last pass), so the jobs ask
// for it.
func runP3D(n int) ([]Row, error) {
	if err := usePlugin(true); err != nil {
		return nil, err
	}
	script, err := writeScript("p3d.sh", "true\n")
	if err != nil {
		return nil, err
	}
	var ms, rss []float64
	for i := 0; i < n; i++ {
		if err := waitIdle(60 * time.Second); err != nil {
			return nil, err
		}
		tag := "p3d-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		id, _, err := sbatch(fmt.Sprintf("-N1 -o %s/%s.out --gym-otel=delivery=collector %s", jobsDir, tag, script), true)
		if err != nil {
			return nil, err
		}
		if _, err := waitGone(id, 100*time.Millisecond, 120*time.Second); err != nil {
			return nil, err
		}
		log, err := os.ReadFile(filepath.Join(jobOtelDir(id), "supervisor.log"))
		if err != nil {
			return nil, fmt.Errorf("P3D job %s: %v", id, err)
		}
		m := deliveredRE.FindSubmatch(log)
		if m == nil {
			return nil, fmt.Errorf("P3D job %s: no delivery line with the collector's peak RSS in supervisor.log:\n%s", id, lastLines(string(log), 15))
		}
		d, _ := strconv.ParseFloat(string(m[2]), 64)
		r, _ := strconv.ParseFloat(string(m[3]), 64)
		ms, rss = append(ms, d), append(rss, r)
		logf("P3D job %s: %s lines delivered in %.0f ms, the delivering collector's peak RSS %.1f MiB", id, m[1], d, r)
	}
	mlo, mhi := minmax(ms)
	rlo, rhi := minmax(rss)
	return []Row{{
		ID:     "P3D",
		What:   "the drain's second collector (the supervisor's delivery of the drain's and epilog's spans after the job's collector exits): its time in the job's end, its peak RSS",
		Figure: fmt.Sprintf("%.0f ms, peak RSS %.1f MiB (medians)", median(ms), median(rss)),
		Spread: fmt.Sprintf("%.0f-%.0f ms, %.1f-%.1f MiB over %d jobs", mlo, mhi, rlo, rhi, len(ms)),
		Target: "report", Met: "-",
	}}, nil
}
