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
// lines and the attempt's ms. The supervisor sends them itself, one
// request per line (delivery.Once); before, a second collector did
// (replay.Send), which took 282-650 ms and 63.5 MiB at its peak here.
var deliveredRE = regexp.MustCompile(`the appended lines \((\d+)\) delivered to the backend \S+ in (\d+) ms \(one request each, no second collector\)`)

// runP3D runs n one-node --gym-otel jobs of a short script one after the
// other and reads, in each job's supervisor.log, what the delivery of the
// drain's lines cost: its ms (the supervisor exits after it, and the
// job's epilog waits for the supervisor: it is part of the job's end).
// Only otel.delivery: collector delivers them apart (the default delivery
// from the files sends the appended lines with the files' last pass), so
// the jobs ask for it.
func runP3D(n int) ([]Row, error) {
	if err := usePlugin(true); err != nil {
		return nil, err
	}
	script, err := writeScript("p3d.sh", "true\n")
	if err != nil {
		return nil, err
	}
	var ms []float64
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
			return nil, fmt.Errorf("P3D job %s: no delivery line of the appended lines in supervisor.log:\n%s", id, lastLines(string(log), 15))
		}
		d, _ := strconv.ParseFloat(string(m[2]), 64)
		ms = append(ms, d)
		logf("P3D job %s: %s lines delivered in %.0f ms", id, m[1], d)
	}
	lo, hi := minmax(ms)
	return []Row{{
		ID:     "P3D",
		What:   "the delivery of the drain's and epilog's spans after the job's collector exits (delivery: collector): its time in the job's end; the supervisor's own requests, no second collector",
		Figure: fmt.Sprintf("%.0f ms (median), no second process", median(ms)),
		Spread: fmt.Sprintf("%.0f-%.0f ms over %d jobs", lo, hi, len(ms)),
		Target: "report", Met: "-",
	}}, nil
}
