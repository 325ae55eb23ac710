//go:build vmguest

package guest

import (
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// cgPoint is one point of a cgroup_* series of the job's metrics.jsonl.
type cgPoint struct {
	res, attrs map[string]string
	value      float64
}

// cgroupSeries reads every point of the cgroup_* metrics in path, by name.
func cgroupSeries(t *testing.T, path string) map[string][]cgPoint {
	t.Helper()
	d, err := otlptest.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]cgPoint{}
	for _, m := range d.Metrics {
		if !strings.HasPrefix(m.Name, vocab.CgroupPrefix) {
			continue
		}
		var ps []otlptest.NumberPoint
		if m.Gauge != nil {
			ps = m.Gauge.DataPoints
		} else if m.Sum != nil {
			ps = m.Sum.DataPoints
		}
		for _, p := range ps {
			out[m.Name] = append(out[m.Name], cgPoint{res: m.Resource.Text(), attrs: p.Attributes.Text(), value: p.Value()})
		}
	}
	return out
}

// maxWhere is the largest value of the points whose labels include want,
// and how many there were.
func maxWhere(ps []cgPoint, want map[string]string) (float64, int) {
	m, n := 0.0, 0
	for _, p := range ps {
		ok := true
		for k, v := range want {
			if p.attrs[k] != v {
				ok = false
			}
		}
		if ok {
			m, n = max(m, p.value), n+1
		}
	}
	return m, n
}

// TestCgroupMetricsV2: on Slurm 26.05's cgroup/v2 plugin under systemd,
// with CgroupJobIdPaths unset, Slurm names the job's directory in its
// slurmstepd scope by the job's SLUID; a flagged job whose step 0 holds
// 120 MiB for 8 s has its cgroup metrics read from those real groups: the
// job's and step 0's memory peak at 120 MiB or more, their memory current
// and CPU usage, pressure where the guest kernel keeps it (PSI; else a
// cgroup_not_kept series with the reason, never a 0), and the collector's
// own group's memory and CPU; every series with the job's identity.
func TestCgroupMetricsV2(t *testing.T) {
	waitIdle(t)
	if b, _ := os.ReadFile("/etc/slurm/cgroup.conf"); regexp.MustCompile(`(?im)^\s*CgroupJobIdPaths\s*=\s*yes`).Match(b) {
		t.Fatalf("cgroup.conf sets CgroupJobIdPaths=yes: this test is about the SLUID-named directory")
	}
	d := jobDir(t, "cgroupv2")
	const hold = 120
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf(`#!/bin/sh
srun -n1 sh -c 'cat /proc/self/cgroup > %[1]s/step.cgroup; (head -c %[2]dM /dev/zero; sleep 8) | tail -c %[2]dM > /dev/null'
`, d, hold))
	r := asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=400M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("sbatch --wait: exit %d: %s\n%s\nslurmd:\n%s", r.code, r.stderr, out, tail(slurmd(t), 40))
	}
	id := jobIDOf(t, r)
	waitNoCollector(t)
	waitIdle(t)

	// Where Slurm put the step: <slice>/[<node>_]slurmstepd.scope/<SLUID>/step_0/...
	pc, err := os.ReadFile(d + "/step.cgroup")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`0::/\S*slurmstepd\.scope/([^/]+)/step_0(/|$)`).FindStringSubmatch(string(pc))
	if m == nil {
		t.Fatalf("step 0 ran in %q: not in a step_0 group of Slurm's scope", strings.TrimSpace(string(pc)))
	}
	jobDirName := m[1]
	t.Logf("job %s: Slurm's job directory is %q (step 0 in %s)", id, jobDirName, strings.TrimSpace(string(pc)))
	if !regexp.MustCompile(`^s[0-9A-Z]{13}$`).MatchString(jobDirName) {
		t.Errorf("Slurm 26.05 without CgroupJobIdPaths named the job's directory %q, not by its SLUID", jobDirName)
	}

	ser := cgroupSeries(t, filepath.Join(d, "run", "otel", "metrics.jsonl"))
	var names []string
	for n, ps := range ser {
		names = append(names, fmt.Sprintf("%s(%d)", n, len(ps)))
		for _, p := range ps {
			if p.res["slurm_job_id"] != id || p.res["host.name"] != node {
				t.Errorf("%s: resource slurm_job_id %q host.name %q, want %s %s", n, p.res["slurm_job_id"], p.res["host.name"], id, node)
				break
			}
		}
	}
	t.Logf("cgroup series: %s", strings.Join(names, " "))
	// Before the job's first step (the prolog) and after its end the
	// job's group is not there: said so, not asserted.
	for _, p := range ser[vocab.CgroupNotKept] {
		t.Logf("not kept: cgroup=%s step=%s family=%s: %s", p.attrs["cgroup"], p.attrs["step"], p.attrs["family"], p.attrs["reason"])
	}
	job, step0 := map[string]string{"cgroup": "job"}, map[string]string{"cgroup": "step", "step": "0"}
	collector := map[string]string{"cgroup": "collector"}
	for _, c := range []struct {
		metric string
		labels map[string]string
		least  float64
	}{
		{vocab.CgroupMemoryPeak, job, hold << 20},
		{vocab.CgroupMemoryPeak, step0, hold << 20},
		{vocab.CgroupMemoryCurrent, job, 1},
		{vocab.CgroupMemoryCurrent, step0, 1},
		{vocab.CgroupCPUSeconds, job, 1e-9},
		{vocab.CgroupCPUSeconds, step0, 1e-9},
		{vocab.CgroupMemoryCurrent, collector, 1 << 20},
		{vocab.CgroupCPUSeconds, collector, 1e-9},
	} {
		v, n := maxWhere(ser[c.metric], c.labels)
		t.Logf("%s%v: %d points, max %.6g", c.metric, c.labels, n, v)
		if n == 0 || v < c.least {
			t.Errorf("%s%v: %d points, max %.6g; want at least %.6g", c.metric, c.labels, n, v, c.least)
		}
	}
	if v, _ := maxWhere(ser[vocab.CgroupMemoryLimit], job); v != 400<<20 {
		t.Errorf("the job's group's memory bound %.0f, want --mem=400M (%d)", v, 400<<20)
	}
	// Pressure: kept by this kernel (psi on) or said not to be.
	_, psiErr := os.ReadFile("/proc/pressure/memory")
	for _, fam := range []string{"cpu", "memory", "io"} {
		metric := vocab.CgroupPrefix + fam + "_pressure_some_seconds_total"
		_, n := maxWhere(ser[metric], job)
		_, nk := maxWhere(ser[vocab.CgroupNotKept], map[string]string{"cgroup": "job", "family": fam + "_pressure"})
		t.Logf("%s{cgroup=job}: %d points; not kept: %d (/proc/pressure/memory: %v)", metric, n, nk, psiErr)
		switch {
		case psiErr == nil && n == 0:
			t.Errorf("the kernel keeps PSI, but %s{cgroup=job} has no point", metric)
		case psiErr != nil && (n != 0 || nk == 0):
			t.Errorf("PSI off (%v): %s{cgroup=job} has %d points and %d not-kept series; want none and one", psiErr, metric, n, nk)
		}
	}
}
