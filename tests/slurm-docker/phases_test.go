package slurmdocker

import (
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
)

// TestPhaseSpans (variant alloc): a two-node job with a step per node
// (step 0 on c1 exits 0, step 1 on c2 exits 3 after 1 s) has its Slurm
// phases as spans in each node's traces.jsonl: one trace for the job over
// both nodes, a slurm.job root per node with the prolog, the node's step
// with its exit code, the drain and the epilog under it, the batch step
// with the batch script and the final wait on c1 and the queue wait
// there only; every span with the run's identity (slurm_job_id, run_id,
// Lens' nv.dl.job.uuid) and its node. The step spans come from
// slurmstepd's lines on the control socket, which the supervisor takes from
// root only: steps with exit codes on a node prove slurmstepd sends them as
// root on this release. The backend holds both nodes' job spans.
//
// The cgroup readings: these nodes run no Slurm cgroup plugin
// (proctrack/linuxproc, task/none; CgroupPlugin=disabled on 24.11 and
// 26.05), so each node's files say the job's group is not kept here, with
// the reason, and hold no job cgroup usage.
func TestPhaseSpans(t *testing.T) {
	c := need(t)
	c.switchVariant(t, "alloc")
	c.waitIdle(t, 60*time.Second)
	host, dir := c.jobDir(t, "phases")
	runID := "run-" + filepath.Base(dir)
	writeFile(t, filepath.Join(host, "job.sh"), `#!/bin/bash
srun -N1 -n1 -w c1 true
srun -N1 -n1 -w c2 bash -c 'sleep 1; exit 3'
echo done
`, 0o755)
	jobID := c.sbatch(t, c.tokenEnv(), dir, fmt.Sprintf("-N2 --gym-otel=job_dir=%s,run_id=%s -o %s/slurm-%%j.out job.sh", dir, runID, dir))
	state, exit := c.waitJob(t, jobID, 120*time.Second)
	out, _ := os.ReadFile(filepath.Join(host, "slurm-"+jobID+".out"))
	if state != "COMPLETED" || exit != "0:0" {
		t.Fatalf("job %s: %s ExitCode=%s; output:\n%s", jobID, state, exit, out)
	}
	c.waitNothingLeft(t, jobID)

	conf, err := c.on("ctl", "scontrol", "show", "config")
	m := regexp.MustCompile(`(?m)^ClusterName\s*=\s*(\S+)`).FindStringSubmatch(conf)
	if err != nil || m == nil {
		t.Fatalf("scontrol show config: %v, no ClusterName", err)
	}
	ident := map[string]string{"slurm_job_id": jobID, "run_id": runID, "user": jobUser,
		render.LensJobUUID: render.LensUUID("nemo.lens.job/" + m[1] + "/" + jobID)}
	otelDir := map[string]string{"c1": filepath.Join(host, "otel"), "c2": filepath.Join(host, "otel", "nodes", "c2")}
	want := map[string]slurmkit.NodePhases{
		"c1": {Node: "c1", Identity: ident, Steps: map[string]int{"0": 0}, Batch: true},
		"c2": {Node: "c2", Identity: ident, Steps: map[string]int{"1": 3}},
	}
	got := map[string]slurmkit.NodeSpans{}
	for _, n := range []string{"c1", "c2"} {
		got[n] = slurmkit.CheckNodePhases(t, slurmkit.PhaseSpans(t, otelDir[n]), want[n])
	}
	if got["c1"].Job.Trace != got["c2"].Job.Trace || got["c1"].Job.ID == got["c2"].Job.ID {
		t.Errorf("the nodes' job spans: c1 trace %s span %s, c2 trace %s span %s; want one trace, a span per node",
			got["c1"].Job.Trace, got["c1"].Job.ID, got["c2"].Job.Trace, got["c2"].Job.ID)
	}
	// Steps run where they were put: c1 has no span of c2's step.
	if _, ok := got["c1"].Steps["1"]; ok {
		t.Errorf("c1 has a span of step 1, which ran on c2")
	}
	if _, ok := got["c2"].Steps["0"]; ok {
		t.Errorf("c2 has a span of step 0, which ran on c1")
	}
	if d := got["c2"].Steps["1"].End.Sub(got["c2"].Steps["1"].Start); d < time.Second || d > 20*time.Second {
		t.Errorf("c2: step 1 (sleep 1) took %v", d)
	}
	q1, q2 := got["c1"].ByName[vocab.SpanQueueWait], got["c2"].ByName[vocab.SpanQueueWait]
	if len(q1) != 1 || len(q2) != 0 || q1[0].Parent != got["c1"].Job.ID || !q1[0].Start.Equal(got["c1"].Job.Start) {
		t.Errorf("queue wait spans: %d on c1, %d on c2; want one on the batch node, under its job span, which starts with it", len(q1), len(q2))
	}
	t.Logf("job %s on Slurm %s: c1 %d phase spans, c2 %d", jobID, c.slurmVersion, len(slurmkit.PhaseSpans(t, otelDir["c1"])), len(slurmkit.PhaseSpans(t, otelDir["c2"])))

	// The cgroup readings: no Slurm cgroup here, said with its reason.
	for _, n := range []string{"c1", "c2"} {
		all := readOTLP(t, filepath.Join(otelDir[n], "metrics.jsonl"))
		notKept := find(all, metricNamed(vocab.CgroupNotKept))
		var jobReason string
		var reasons []string
		for _, it := range notKept {
			if it.res["slurm_job_id"] != jobID || it.res["host.name"] != n {
				t.Errorf("%s: cgroup_not_kept with resource %v", n, it.res)
			}
			for _, a := range it.attrs {
				reasons = append(reasons, fmt.Sprintf("%s/%s/%s: %s", a["cgroup"], a["step"], a["family"], a["reason"]))
				if a["cgroup"] == "job" && jobReason == "" {
					jobReason = a["reason"]
				}
			}
		}
		if !strings.Contains(jobReason, "no Slurm cgroup of job "+jobID) {
			t.Errorf("%s: no cgroup_not_kept{cgroup=\"job\"} saying the job's Slurm cgroup is not on this node (reason %q)", n, jobReason)
		}
		var own []string
		for _, it := range all {
			if strings.HasPrefix(it.name, vocab.CgroupPrefix) && it.name != vocab.CgroupNotKept {
				for _, a := range it.attrs {
					if a["cgroup"] == "job" || a["cgroup"] == "step" {
						t.Errorf("%s: %s of a %s group %v, but this node has no Slurm cgroup", n, it.name, a["cgroup"], a)
					} else {
						own = append(own, it.name+"{cgroup="+a["cgroup"]+"}")
					}
				}
			}
		}
		t.Logf("%s: not kept: %s; other cgroup series: %d (%v)", n, strings.Join(uniq(reasons), "; "), len(own), uniq(own))
	}

	// The backend holds both nodes' job spans.
	deadline := time.Now().Add(patience)
	for {
		nodes := map[string]bool{}
		for _, it := range readOTLPLenient(t, filepath.Join(c.work, "backend", "traces.jsonl")) {
			if it.signal == "span" && it.name == vocab.SpanJob && it.res["slurm_job_id"] == jobID && it.res["run_id"] == runID {
				nodes[it.res["host.name"]] = true
			}
		}
		if nodes["c1"] && nodes["c2"] {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the backend holds slurm.job spans of job %s from %v, want c1 and c2", jobID, nodes)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	c.waitIdle(t, 60*time.Second)
}

func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
