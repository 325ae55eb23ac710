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

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// TestRequeue: `scontrol requeue` of a running two-node job. Slurm keeps
// the job id and runs the job again (restart count 1, and on 25.11+ a new
// SLUID) once it is eligible (cred_expire + 1 s after the requeue, 31 s
// here); both runs write the same job dir. Every resource of both runs
// carries slurm_job_id, slurm_job_restart_count (0, then 1) and, where Slurm
// has one, slurm_job_sluid (one per run); the second run appends to the
// first run's jsonl files and keeps its state.json and collector.yaml as
// state.<job>.0.json and collector.<job>.0.yaml; nothing is left, no node
// drains.
func TestRequeue(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "requeue")
	// Each run waits until both nodes' collectors have written a
	// node_exporter scrape of it; the first then waits to be requeued, the
	// second ends by itself.
	writeFile(t, filepath.Join(host, "job.sh"), fmt.Sprintf(`#!/bin/bash
D=%[1]s
n=${SLURM_RESTART_COUNT:-0}
%[2]s/gym-standin --rollouts 1 --sandbox-provider docker || exit 92
for f in $D/otel/metrics.jsonl $D/otel/nodes/c2/metrics.jsonl; do
	for i in $(seq 1 600); do grep -s '"slurm_job_restart_count","value":{"intValue":"'$n'"}' $f | grep -q '"name":"node_' && break; sleep 0.2; done
done
if [ "$n" = 0 ]; then touch $D/run0-done; sleep 600; exit 93; fi
touch $D/run$n-done
`, dir, standins), 0o755)
	id := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf("-N2 --requeue --open-mode=append --gym-otel=job_dir=%s -o %s/slurm-%%j.out job.sh", dir, dir))
	waitFile(t, 90*time.Second, filepath.Join(host, "run0-done"))
	t0 := time.Now()
	if out, err := c.on("ctl", "scontrol", "requeue", id); err != nil {
		t.Fatalf("scontrol requeue %s: %v %s", id, err, out)
	}
	waitFile(t, 120*time.Second, filepath.Join(host, "run1-done"))
	if st, ex := c.waitJob(t, id, 90*time.Second); st != "COMPLETED" || ex != "0:0" {
		out, _ := os.ReadFile(filepath.Join(host, "slurm-"+id+".out"))
		t.Fatalf("job %s: %s %s after the requeue, want COMPLETED 0:0; output:\n%s", id, st, ex, out)
	}
	t.Logf("job %s: requeued, second run done %.1f s after the requeue", id, time.Since(t0).Seconds())

	wantSLUID := slurmAtLeast(c.slurmVersion, 25, 11)
	dirs := map[string]string{"c1": filepath.Join(host, "otel"), "c2": filepath.Join(host, "otel", "nodes", "c2")}
	for node, d := range dirs {
		var all []item
		for _, sig := range []string{"metrics", "traces", "logs"} {
			all = append(all, readOTLP(t, filepath.Join(d, sig+".jsonl"))...)
		}
		runs := map[string]int{}
		sluids := map[string]string{} // restart count -> SLUID
		for _, it := range all {
			rc, ok := it.res["slurm_job_restart_count"]
			if !ok || it.res["slurm_job_id"] != id {
				t.Fatalf("%s: a %s %q without the run's identity: %v", node, it.signal, it.name, it.res)
			}
			runs[rc]++
			s, has := it.res["slurm_job_sluid"]
			if has != wantSLUID {
				t.Fatalf("%s: a %s %q: slurm_job_sluid %q on Slurm %s", node, it.signal, it.name, s, c.slurmVersion)
			}
			if prev, seen := sluids[rc]; seen && prev != s {
				t.Errorf("%s: run %s has two SLUIDs: %s and %s", node, rc, prev, s)
			}
			sluids[rc] = s
		}
		t.Logf("%s: items per restart count %v, SLUIDs %v", node, runs, sluids)
		if len(runs) != 2 || runs["0"] == 0 || runs["1"] == 0 {
			t.Errorf("%s: items per restart count %v, want both runs 0 and 1", node, runs)
		}
		if wantSLUID && (sluids["0"] == "" || sluids["0"] == sluids["1"]) {
			t.Errorf("%s: SLUIDs %v: want one per run", node, sluids)
		}
		for _, rc := range []string{"0", "1"} {
			if len(find(all, func(it item) bool {
				return it.res["slurm_job_restart_count"] == rc && strings.HasPrefix(it.name, "node_")
			})) == 0 {
				t.Errorf("%s: no node_exporter series of run %s", node, rc)
			}
		}
		if node == "c1" {
			for _, rc := range []string{"0", "1"} {
				if len(find(all, func(it item) bool {
					return it.signal == "span" && it.name == "gym.rollout" && it.res["slurm_job_restart_count"] == rc
				})) != 1 {
					t.Errorf("c1: want one gym.rollout span of run %s", rc)
				}
			}
		}
		// Each run's state.json and collector.yaml.
		for name, want := range map[string]string{
			"state." + id + ".0.json":     `"restart_count": "0"`,
			"state.json":                  `"restart_count": "1"`,
			"collector." + id + ".0.yaml": "0",
			"collector.yaml":              "1",
		} {
			b, err := os.ReadFile(filepath.Join(d, name))
			if strings.HasPrefix(name, "collector") {
				// The restart count the configuration stamps.
				if ident, ierr := render.ConfigIdentity(b); err != nil || ierr != nil || ident["slurm_job_restart_count"] != want {
					t.Errorf("%s: %s stamps slurm_job_restart_count %q, want %s (%v %v)", node, name, ident["slurm_job_restart_count"], want, err, ierr)
				}
				continue
			}
			if err != nil || !strings.Contains(string(b), want) {
				t.Errorf("%s: %s lacks %s (%v)", node, name, want, err)
			}
			if strings.HasPrefix(name, "state") && !strings.Contains(string(b), `"drained"`) {
				t.Errorf("%s: %s is not drained: %s", node, name, b)
			}
		}
		cl, _ := os.ReadFile(filepath.Join(d, "collector.log"))
		for _, rc := range []string{"0", "1"} {
			if !strings.Contains(string(cl), "gym-otel: run of job "+id+", restart count "+rc) {
				t.Errorf("%s: collector.log does not mark run %s", node, rc)
			}
		}
	}
	c.waitNothingLeft(t, id)
	c.waitIdle(t, 30*time.Second)
}

var slurmVerRe = regexp.MustCompile(`^(\d+)\.(\d+)`)

// slurmAtLeast: whether a Debian Slurm version ("26.05.5-1") is at least
// major.minor.
func slurmAtLeast(v string, major, minor int) bool {
	m := slurmVerRe.FindStringSubmatch(v)
	if m == nil {
		return false
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[2])
	return a > major || a == major && b >= minor
}
