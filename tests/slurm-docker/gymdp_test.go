package slurmdocker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// gymDPConfig is a resolved Gym submit config of multi-node data parallel:
// one vllm service with two instances over a pool of two nodes. Gym runs
// one vllm serve per node; the first serves the API and /metrics, the
// other runs --headless with no HTTP at all.
const gymDPConfig = `services:
  policy:
    type: vllm
    container: vllm.sqsh
    model: tiny-model
    served_model_name: tiny-model
    number_of_instances: 2
compute:
  dockerlab:
    type: slurm
    account: lab
    node_pools:
      gpu: {partition: debug, nodes: 2}
driver:
  gym_install: {ref: v0}
  policy_model: policy
  benchmarks:
    gsm8k: {}
job:
  output_path: %s
`

// gymDPScript starts the service as Gym's executor does (one step over
// both nodes; node 0 of the step serves, the others are headless), waits
// for the head's first scrape, lets a few scrape intervals pass on both
// nodes and exits 0.
func gymDPScript(dir string) string {
	return fmt.Sprintf(`#!/bin/bash
D=%[1]s
srun -N2 --ntasks-per-node=1 --overlap bash -c '
  if [ "$SLURM_NODEID" = "0" ]; then
    exec %[2]s/vllm-standin --port 8000 --model tiny-model --scrape-log %[1]s/scrapes.$SLURMD_NODENAME
  else
    # vllm serve --headless: data-parallel ranks, no API server, no HTTP.
    echo headless > %[1]s/headless.$SLURMD_NODENAME
    exec sleep 300
  fi' &
# The head's first scrape: within one interval of the collector's start,
# later on a loaded machine; the test fails on no vLLM metrics if it never
# comes.
for i in $(seq 1 1200); do [ -s $D/scrapes.c1 ] && break; sleep 0.1; done
sleep 6
exit 0
`, dir, standins)
}

// upPoint is one data point of the Prometheus receiver's up metric: the
// scrape job (service.name.override after the identity transform), the
// node and the value.
type upPoint struct {
	job, node string
	value     float64
}

// readUp reads every up data point of a metrics.jsonl; a line that does
// not parse is skipped, a missing file fails the test.
func readUp(t *testing.T, path string) []upPoint {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	d, err := otlptest.ReadGrowing(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []upPoint
	for _, m := range d.Named("up") {
		if m.Gauge == nil {
			continue
		}
		res := m.Resource.Text()
		for _, p := range m.Gauge.DataPoints {
			v := -1.0
			if p.AsDouble != nil || p.AsInt != nil {
				v = p.Value()
			}
			out = append(out, upPoint{res["service.name.override"], res["host.name"], v})
		}
	}
	return out
}

// Gym's multi-node data-parallel deployment on two nodes: the head node's
// collector scrapes the vLLM API server and its files hold its metrics
// once the server is up; the headless worker serves no HTTP, its collector
// has no scrape job for it and no up series of it; every target answered
// with no failed scrape between answers.
func TestGymDataParallelJob(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "gymdp")
	writeFile(t, filepath.Join(host, "submit.yaml"), fmt.Sprintf(gymDPConfig, dir), 0o644)
	writeFile(t, filepath.Join(host, "job.sh"), gymDPScript(dir), 0o755)
	jobID := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf(
		"-N2 --gym-otel=config=%s/submit.yaml,run_id=dp-%s,benchmark=gsm8k -o %s/slurm-%%j.out job.sh", dir, filepath.Base(dir), dir))
	state, exit := c.waitJob(t, jobID, 180*time.Second)
	out, _ := os.ReadFile(filepath.Join(host, "slurm-"+jobID+".out"))
	if state != "COMPLETED" || exit != "0:0" {
		t.Fatalf("job %s: %s %s; output:\n%s", jobID, state, exit, out)
	}
	if _, err := os.Stat(filepath.Join(host, "headless.c2")); err != nil {
		t.Fatalf("the headless worker did not run on c2: %v", err)
	}
	head := filepath.Join(host, "otel")
	worker := filepath.Join(host, "otel", "nodes", "c2")
	for d, want := range map[string]bool{head: true, worker: false} {
		y, err := os.ReadFile(filepath.Join(d, "collector.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(y), "job_name: gym-vllm/policy"); got != want {
			t.Errorf("%s/collector.yaml: a scrape job for gym-vllm/policy: %v, want %v", d, got, want)
		}
	}
	var vllm []string
	for _, it := range readOTLP(t, filepath.Join(head, "metrics.jsonl")) {
		if it.signal == "metric" && strings.HasPrefix(it.name, "vllm_") && it.res["host.name"] == "c1" {
			vllm = append(vllm, it.name)
		}
	}
	if len(vllm) == 0 {
		t.Errorf("no vLLM metrics of the head node c1 in %s/metrics.jsonl", head)
	}
	for _, it := range readOTLP(t, filepath.Join(worker, "metrics.jsonl")) {
		if strings.HasPrefix(it.name, "vllm_") {
			t.Errorf("a vLLM metric in the worker's files: %s %v", it.name, it.res)
			break
		}
	}
	// The worker never scrapes the headless server: no up series of the
	// vLLM job in its files at all.
	for _, p := range readUp(t, filepath.Join(worker, "metrics.jsonl")) {
		if p.job == "gym-vllm/policy" {
			t.Errorf("the worker's collector scraped the headless server: up=%v for %s on %s", p.value, p.job, p.node)
			break
		}
	}
	// Every target scraped and answered. The first scrape comes at the
	// target's hash offset, anywhere within one interval of the
	// collector's start, so it may come before the script has started the
	// head's server: failed scrapes before a target's first answer are
	// warming up, after its last it had ended; only a failure between two
	// answers (or none answered) is a failed scrape.
	seen := map[string]bool{}
	for node, d := range map[string]string{"c1": head, "c2": worker} {
		ts, err := inspect.Targets(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			seen[node+" "+x.Job] = true
			t.Logf("%s: target %s (%s): %s", node, x.Job, x.Instance, inspect.ScrapeSummary(x.Scrapes, x.Answered, x.WarmingUp, x.Ended))
			if x.Answered == 0 || x.Failed() > 0 {
				t.Errorf("%s: target %s (%s): %d scrapes, %d answered, %d failed between answers", node, x.Job, x.Instance, x.Scrapes, x.Answered, x.Failed())
			}
		}
	}
	t.Logf("job %s: %d vLLM metric series on c1; up series %v", jobID, len(vllm), seen)
	c.waitNothingLeft(t, jobID)
}
