package slurmdocker

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The short job of issue 13 on two nodes, then on one, at the default
// scrape interval of 15 s: a vLLM stand-in on each node whose counters change only with
// requests, and a driver of 2 s on each node sending them. Every node's
// final counter value arrives in its files and at the backend, in a sample
// taken after that node's driver exited; every target (vLLM and
// node_exporter) has a sample after the script's last line. The batch
// step asks its node's supervisor for the final scrape at once, which asks
// the other node's over TCP (the nodes share the job dir here): on every
// node the first collector run is stopped with scrape_on_shutdown and a
// second one runs to the drain, every receipt has final figures, and the
// hold ends once every node has the sample, or by its bound. How long the job took after its last line is logged, not
// asserted: on a loaded machine the epilogs take longer, and what the hold
// is for (every final counter in the files) is asserted.
func TestShortJobFinalSample(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	for _, nodes := range []int{2, 1} {
		t.Run(fmt.Sprintf("%d-nodes", nodes), func(t *testing.T) { c.shortJob(t, nodes) })
	}
}

func (c *cluster) shortJob(t *testing.T, nodes int) {
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "short")
	writeFile(t, filepath.Join(host, "submit.yaml"), fmt.Sprintf(`compute:
  dockerlab: {}
driver:
  gym_install: /opt/gym
job:
  output_path: %s
services:
  policy:
    type: vllm
    port: 8000
    served_model_name: tiny-model
otel:
  scrape_interval_seconds: 15
`, dir), 0o644)
	writeFile(t, filepath.Join(host, "job.sh"), fmt.Sprintf(`#!/bin/bash
D=%[1]s
srun -N%[3]d --ntasks-per-node=1 --overlap bash -c 'exec %[2]s/vllm-standin --port 8000 --model tiny-model --count-on request' &
srun -N%[3]d --ntasks-per-node=1 --overlap bash -c '
  for i in $(seq 1 1200); do curl -sf http://127.0.0.1:8000/health >/dev/null && break; sleep 0.1; done
  end=$(( $(date +%%s%%N) + 2000000000 ))
  while [ $(date +%%s%%N) -lt $end ]; do curl -sf -XPOST http://127.0.0.1:8000/v1/completions >/dev/null || exit 3; sleep 0.05; done
  curl -sf http://127.0.0.1:8000/metrics | awk "/^vllm:prompt_tokens_total/ {print \$2}" > %[1]s/final.$SLURMD_NODENAME
  date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ > %[1]s/exit.$SLURMD_NODENAME
' || exit 9
date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ > $D/last
`, dir, standins, nodes), 0o755)
	jobID := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf("-N%d --gym-otel=config=%s/submit.yaml -o %s/slurm-%%j.out job.sh", nodes, dir, dir))
	state, exit := c.waitJob(t, jobID, 120*time.Second)
	out, _ := os.ReadFile(filepath.Join(host, "slurm-"+jobID+".out"))
	if state != "COMPLETED" || exit != "0:0" {
		t.Fatalf("job %s: %s ExitCode=%s; output:\n%s", jobID, state, exit, out)
	}
	last := testenv.ReadTime(t, filepath.Join(host, "last"))

	// The hold ends once every node's collector has the sample, or by its
	// bound. The batch step logs why it ended.
	names := []string{"c1", "c2"}[:nodes]
	c1 := c.slurmdLog(t, "c1")
	if !strings.Contains(c1, "gym-otel: job "+jobID+": batch script done, waiting 16 s") {
		t.Errorf("c1: no final-scrape wait of 16 s logged for job %s", jobID)
	}
	on := "c1"
	if nodes > 1 {
		on = "every node"
	}
	early := regexp.MustCompile(`gym-otel: job ` + jobID + `: every target on ` + on + ` has a sample after the script's last line: final-scrape wait ended after (\d+) ms`).FindStringSubmatch(c1)
	full := regexp.MustCompile(`gym-otel: job ` + jobID + `: final-scrape wait done after (\d+) ms`).FindStringSubmatch(c1)
	switch {
	case early != nil:
		t.Logf("%d nodes: the hold ended after %s ms", nodes, early[1])
	case full != nil:
		if ms, _ := strconv.Atoi(full[1]); ms < 16000 {
			t.Errorf("c1: the hold ended after %d ms, before its bound of 16 s, with no reason logged", ms)
		}
		t.Logf("%d nodes: the batch step held the full 16 s (%s ms)", nodes, full[1])
	default:
		t.Errorf("c1: job %s: the batch step logged no end of its hold", jobID)
	}
	var end time.Time
	for _, n := range names {
		if at, ok := logTime(c.slurmdLog(t, n), `.*JobId=`+jobID+`(?: SLUID=\S+)?: sent epilog complete msg`); ok && at.After(end) {
			end = at
		}
	}
	if end.IsZero() {
		t.Errorf("no epilog complete line for job %s", jobID)
	} else {
		t.Logf("%d nodes, interval 15 s: the script's last line to the job's end (last epilog) %v", nodes, end.Sub(last).Round(10*time.Millisecond))
	}

	backend := filepath.Join(c.work, "backend", "metrics.jsonl")
	for _, n := range names {
		d := filepath.Join(host, "otel")
		if n != "c1" {
			d = filepath.Join(d, "nodes", n)
		}
		slurmkit.CheckFinalSample(t, slurmkit.FinalSample{Node: n, Job: jobID,
			Final: filepath.Join(host, "final."+n), Exit: filepath.Join(host, "exit."+n),
			Metrics: filepath.Join(d, "metrics.jsonl"), BackendMetrics: backend})
		// Every target of the node (vLLM, node_exporter) answered a
		// scrape after the script's last line.
		nodeLast, err := otlptest.SumPoints(filepath.Join(d, "metrics.jsonl"), "node_cpu_seconds_total")
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := otlptest.Latest(nodeLast, n, jobID); !ok || !p.At.After(last) {
			t.Errorf("%s: node_exporter's last sample %v (found %v) is not after the script's last line %v", n, p.At, ok, last)
		}
		// Nothing lost at the collectors' shutdowns, and the node's
		// final scrape came at the script's end.
		rc, err := receipt.Read(d)
		if err != nil {
			t.Fatal(err)
		}
		clog, _ := os.ReadFile(filepath.Join(d, "collector.log"))
		if !rc.Complete() || rc.Trouble() || rc.Collectors != 2 || !strings.Contains(string(clog), "gym-otel: final scrape at the batch script's end") {
			t.Errorf("%s: receipt %s (%d collector runs), final scrape logged %v; want final figures of 2 runs and the final scrape",
				n, strings.Join(rc.Summary(), "; "), rc.Collectors, strings.Contains(string(clog), "gym-otel: final scrape at the batch script's end"))
		}
	}
	c.waitNothingLeft(t, jobID)
	c.waitIdle(t, 60*time.Second)
}
