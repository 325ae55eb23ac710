package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
)

// p3Interval is the scrape interval of the P3-at-15-s jobs: the seed's
// default.
const p3Interval = 15

// p3at15Script is a short job at the default interval: a vLLM stand-in on
// every node of the job (port 17851 + node index), a 2 s driver, then the
// last line.
func p3at15Script() string {
	return fmt.Sprintf(`srun -N$SLURM_JOB_NUM_NODES --ntasks-per-node=1 --overlap bash -c 'exec %[2]s/vllm-standin --port $((17851 + SLURM_NODEID)) --model bench-model' &
for i in $(seq 1 100); do curl -sf -o /dev/null http://127.0.0.1:17851/health && break; sleep 0.1; done
sleep 2
date +%%s%%N > %[1]s/last.$SLURM_JOB_ID
`, jobsDir, installDir)
}

// runP3At15 runs rounds of a two-node and a one-node short job at scrape
// interval 15 s with a vLLM stand-in per node and reports: the script's
// last line to the job's end (P3) for each, and each target's wait from
// its collector's ready to its first sample.
func runP3At15(rounds int) ([]Row, error) {
	if err := usePlugin(true); err != nil {
		return nil, err
	}
	script, err := writeScript("p3at15.sh", p3at15Script())
	if err != nil {
		return nil, err
	}
	// One node pool per node, one vLLM service per pool (port 17851 + the
	// node's index: the bench's nodes share this host's loopback).
	cfgs := map[int]string{}
	for _, n := range []int{1, 2} {
		pools, services := "", ""
		for i := 0; i < n; i++ {
			pools += fmt.Sprintf("      n%d: {nodes: 1}\n", i)
			services += fmt.Sprintf("  svc%d: {type: vllm, port: %d, served_model_name: bench-model, node_pool: n%d}\n", i, 17851+i, i)
		}
		cfgs[n] = filepath.Join(jobsDir, fmt.Sprintf("p3at15-%d.yaml", n))
		body := fmt.Sprintf("compute:\n  bench:\n    node_pools:\n%sdriver:\n  gym_install: /opt/gym\notel:\n  scrape_interval_seconds: %d\nservices:\n%s", pools, p3Interval, services)
		if err := os.WriteFile(cfgs[n], []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	type job struct {
		nodes   int
		id, dir string
	}
	var jobs []job
	for r := 0; r < rounds; r++ {
		for _, n := range []int{2, 1} {
			if err := waitIdle(60 * time.Second); err != nil {
				return nil, err
			}
			dir := filepath.Join(jobsDir, fmt.Sprintf("p3at15-%d-%d-%d", r, n, time.Now().UnixNano()%1e6))
			id, _, err := sbatch(fmt.Sprintf("-N%d -o /dev/null --gym-otel=config=%s,job_dir=%s %s", n, cfgs[n], dir, script), true)
			if err != nil {
				return nil, err
			}
			if _, err := waitGone(id, 100*time.Millisecond, 120*time.Second); err != nil {
				return nil, err
			}
			jobs = append(jobs, job{n, id, dir})
			logf("P3 at %d s round %d/%d: %d-node job %s done", p3Interval, r+1, rounds, n, id)
		}
	}
	if err := waitIdle(60 * time.Second); err != nil {
		return nil, err
	}
	var logs [][]logLine
	for n := 1; n <= nodeCount; n++ {
		logs = append(logs, readLog(fmt.Sprintf("slurmd-gn%d.log", n)))
	}
	end := map[int][]float64{}
	var first []float64
	missing := 0
	for _, j := range jobs {
		last, err := readNanos(filepath.Join(jobsDir, "last."+j.id))
		if err != nil {
			return nil, err
		}
		var done time.Time
		for _, l := range logs {
			if t := firstMatch(l, "JobId="+j.id+": sent epilog complete msg"); t.After(done) {
				done = t
			}
		}
		if !done.IsZero() {
			end[j.nodes] = append(end[j.nodes], secs(done.Sub(last)))
		}
		for n := 1; n <= j.nodes; n++ {
			node := "gn" + strconv.Itoa(n)
			ready := firstMatch(logs[n-1], "gym-otel: job "+j.id+": collector ready on "+node)
			d := filepath.Join(j.dir, "otel")
			if n > 1 {
				d = filepath.Join(d, "nodes", node)
			}
			ts, err := inspect.Targets(d)
			if err != nil {
				return nil, err
			}
			for _, t := range ts {
				if t.First.IsZero() || ready.IsZero() {
					missing++
					continue
				}
				first = append(first, secs(t.First.Sub(ready)))
			}
		}
	}
	lo2, hi2 := quart(end[2])
	lo1, hi1 := quart(end[1])
	flo, fhi := minmax(first)
	target := 2.0 // every node scrapes at the script's end (the final scrape): no interval to wait
	return []Row{
		{ID: "P3", What: fmt.Sprintf("at interval %d s (a vLLM stand-in per node, a 2 s driver), two nodes: the script's last line to the job's end", p3Interval),
			Figure: fmt.Sprintf("%.2f s", median(end[2])), Spread: fmt.Sprintf("p25-p75 %.2f-%.2f s", lo2, hi2),
			Target: fmt.Sprintf("<= %.0f s (the hold's bound: interval + 1 s; Gym: 21.0 s)", target), Met: yes(median(end[2]) <= target)},
		{ID: "P3", What: "the same, one node (the hold ends once the node's final scrape is in its files)",
			Figure: fmt.Sprintf("%.2f s", median(end[1])), Spread: fmt.Sprintf("p25-p75 %.2f-%.2f s", lo1, hi1),
			Target: fmt.Sprintf("<= %.0f s", target), Met: yes(median(end[1]) <= target)},
		{ID: "P3", What: fmt.Sprintf("at interval %d s: a target's wait from its collector's ready (slurmd log) to its first sample (the job's final scrape at its script's end, a few seconds in, is the first when it comes before the target's offset)", p3Interval),
			Figure: fmt.Sprintf("median %.2f s, max %.2f s (%d targets, %d without a sample)", median(first), fhi, len(first), missing),
			Spread: fmt.Sprintf("min %.2f s", flo),
			Target: fmt.Sprintf("median <= 1 s (the phase chosen), each <= %d s (one interval)", p3Interval),
			Met:    yes(missing == 0 && len(first) > 0 && median(first) <= 1 && fhi <= float64(p3Interval))},
	}, nil
}
