package cgroup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostDirs are the test process's own groups on this host, one per
// hierarchy DiscoverStats finds (read-only: nothing is made or written).
func hostDirs(t *testing.T, version Version) StatsDirs {
	t.Helper()
	hs, err := DiscoverStats("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	self, err := ProcCgroups("self")
	if err != nil {
		t.Fatal(err)
	}
	var ds StatsDirs
	for _, h := range hs {
		if h.Version != version {
			continue
		}
		if p, ok := self.pathIn(h); ok && isDir(filepath.Join(h.Mount, p)) {
			ds = append(ds, StatsDir{H: h, Path: filepath.Join(h.Mount, p)})
		}
	}
	if len(ds) == 0 {
		t.Skipf("this host mounts no cgroup v%d hierarchy this test's process is in", version)
	}
	return ds
}

// TestReadHostV1 reads the real v1 files of the test process's own groups
// on this host (memory, cpuacct): current and peak memory and CPU time
// are kept, the OOM kill count is kept (Linux 4.13+), and pressure, which
// v1 does not keep, is reported as not kept with the reason, never as 0.
func TestReadHostV1(t *testing.T) {
	ds := hostDirs(t, V1)
	var mem bool
	for _, d := range ds {
		mem = mem || d.has("memory")
	}
	if !mem {
		t.Skip("no v1 memory hierarchy on this host")
	}
	st := ds.Read(KernelRelease())
	t.Logf("host v1 %v: values %v, not kept %v", ds, st.Values, st.NotKept)
	if st.Values[MemoryCurrentBytes] <= 0 {
		t.Errorf("memory current %v, want > 0 (this process is charged)", st.Values[MemoryCurrentBytes])
	}
	if st.Values[MemoryPeakBytes] < st.Values[MemoryCurrentBytes] {
		t.Errorf("memory peak %v below current %v", st.Values[MemoryPeakBytes], st.Values[MemoryCurrentBytes])
	}
	if _, ok := st.Values[OOMKills]; !ok {
		t.Errorf("oom kills not kept on kernel %s: %q", KernelRelease(), st.NotKept["oom_kills"])
	}
	if st.Values[CPUSeconds] <= 0 {
		t.Errorf("CPU seconds %v, want > 0", st.Values[CPUSeconds])
	}
	for _, fam := range []string{"cpu_pressure", "memory_pressure", "io_pressure"} {
		if !strings.Contains(st.NotKept[fam], "cgroup v1 keeps no pressure") {
			t.Errorf("%s: not kept reason %q, want v1's", fam, st.NotKept[fam])
		}
		for _, n := range Families[fam] {
			if v, ok := st.Values[n]; ok {
				t.Errorf("%s = %v on v1 only: must be absent, not a value", n, v)
			}
		}
	}
	for _, fam := range FamilyNames() {
		_, nk := st.NotKept[fam]
		if kept(st.Values, fam) == nk {
			t.Errorf("family %s: kept %v and not kept %v: exactly one must hold", fam, kept(st.Values, fam), nk)
		}
	}
}

// TestReadHostUnified reads the real v2 files of the test process's group
// in this host's unified hierarchy (beside the v1 controllers it binds no
// controller): the kernel keeps pressure and CPU usage there (PSI on),
// and memory is not kept, with the reason.
func TestReadHostUnified(t *testing.T) {
	ds := hostDirs(t, V2)
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Skipf("PSI is off on this host: %v", err)
	}
	st := ds.Read(KernelRelease())
	t.Logf("host v2 %v: values %v, not kept %v", ds, st.Values, st.NotKept)
	for _, n := range []string{CPUPressureSome, MemoryPressureSome, IOPressureSome, CPUSeconds} {
		if _, ok := st.Values[n]; !ok {
			t.Errorf("%s not kept in %v: %v", n, ds, st.NotKept)
		}
	}
	if !exists(filepath.Join(ds[0].Path, "memory.current")) {
		if !strings.Contains(st.NotKept["memory_current"], "memory controller is not enabled") {
			t.Errorf("memory_current: reason %q, want the controller's", st.NotKept["memory_current"])
		}
	}
}

// v2Fixture writes files shaped as Linux's cgroup v2 interface files
// (Documentation/admin-guide/cgroup-v2.rst) into a temporary directory.
// FIXTURE, not this host's: this host is cgroup v1, so what only v2
// shows (memory.peak, per-group pressure with the memory and cpu
// controllers enabled, a kernel with PSI off) is read from copies.
func v2Fixture(t *testing.T, files map[string]string) StatsDirs {
	t.Helper()
	d := t.TempDir()
	for n, s := range files {
		if err := os.WriteFile(filepath.Join(d, n), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return StatsDirs{{H: Hierarchy{Version: V2, Mount: filepath.Dir(d)}, Path: d}}
}

var v2Base = map[string]string{
	"cpu.stat":        "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 7\nthrottled_usec 350000\nnr_bursts 0\nburst_usec 0\n",
	"memory.current":  "104857600\n",
	"memory.max":      "max\n",
	"memory.events":   "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
	"cpu.pressure":    "some avg10=1.00 avg60=0.50 avg300=0.10 total=1500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=250000\n",
	"memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=42\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
	"io.pressure":     "some avg10=0.00 avg60=0.00 avg300=0.00 total=3000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n",
}

func with(m map[string]string, set map[string]string, drop ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range set {
		out[k] = v
	}
	for _, k := range drop {
		delete(out, k)
	}
	return out
}

// TestReadV2Fixture: FIXTURE copies of v2 files. A 5.19+ kernel with PSI
// on keeps everything; a 5.15 kernel has no memory.peak (not kept, naming
// 5.19 and the kernel); PSI off (no pressure files) is not kept, naming
// psi=1; a bounded group reports its bound.
func TestReadV2Fixture(t *testing.T) {
	st := v2Fixture(t, with(v2Base, map[string]string{"memory.peak": "209715200\n", "memory.max": "536870912\n"})).Read("6.1.0-fixture")
	want := map[string]float64{
		CPUSeconds: 2.5, CPUPeriods: 40, CPUThrottledPeriods: 7, CPUThrottledSeconds: 0.35,
		MemoryCurrentBytes: 104857600, MemoryPeakBytes: 209715200, MemoryLimitBytes: 536870912, OOMKills: 1,
		CPUPressureSome: 1.5, CPUPressureFull: 0.25, MemoryPressureSome: 0.000042, MemoryPressureFull: 0,
		IOPressureSome: 3, IOPressureFull: 1,
	}
	for n, v := range want {
		if got, ok := st.Values[n]; !ok || got != v {
			t.Errorf("%s = %v (kept %v), want %v", n, got, ok, v)
		}
	}
	if len(st.NotKept) != 0 {
		t.Errorf("not kept: %v, want nothing", st.NotKept)
	}

	old := v2Fixture(t, v2Base).Read("5.15.0-fixture")
	if _, ok := old.Values[MemoryPeakBytes]; ok {
		t.Errorf("memory peak kept without memory.peak")
	}
	if r := old.NotKept["memory_peak"]; !strings.Contains(r, "5.19") || !strings.Contains(r, "5.15.0-fixture") {
		t.Errorf("memory_peak reason %q, want 5.19 and the kernel", r)
	}
	if _, ok := old.Values[MemoryLimitBytes]; ok {
		t.Errorf("memory.max \"max\" read as a bound")
	}

	nopsi := v2Fixture(t, with(v2Base, nil, "cpu.pressure", "memory.pressure", "io.pressure")).Read("6.1.0-fixture")
	for _, fam := range []string{"cpu_pressure", "memory_pressure", "io_pressure"} {
		if !strings.Contains(nopsi.NotKept[fam], "psi=1") {
			t.Errorf("%s with PSI off: reason %q, want psi=1", fam, nopsi.NotKept[fam])
		}
		for _, n := range Families[fam] {
			if _, ok := nopsi.Values[n]; ok {
				t.Errorf("%s kept with PSI off", n)
			}
		}
	}

	nocpu := v2Fixture(t, with(v2Base, map[string]string{"cpu.stat": "usage_usec 10\nuser_usec 5\nsystem_usec 5\n"})).Read("6.1.0-fixture")
	if _, ok := nocpu.Values[CPUThrottledPeriods]; ok || !strings.Contains(nocpu.NotKept["cpu_throttling"], "cpu controller is not enabled") {
		t.Errorf("cpu controller off: throttling %v, reason %q", nocpu.Values[CPUThrottledPeriods], nocpu.NotKept["cpu_throttling"])
	}
}

// TestFindSlurmJob lays out Slurm's directories as its cgroup plugins
// make them (names from Slurm's source, in a temporary tree) and finds the
// job's and steps' groups: v1 with slurm_<node> (several slurmd per host)
// and /slurm, never a guess between two nodes' groups; v2 in the
// slurmstepd scope, by job id or by SLUID (26.05).
func TestFindSlurmJob(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("memory/slurm_gn1/uid_1000/job_7/step_batch")
	mk("memory/slurm_gn1/uid_1000/job_7/step_0/task_0")
	mk("memory/slurm_gn2/uid_1000/job_7/step_extern")
	mk("cpuacct/slurm/uid_1000/job_7/step_batch")
	mk("other/site_prefix/uid_1000/job_7/step_1")
	mk("twice/a/uid_1000/job_7")
	mk("twice/b/uid_1000/job_7")
	mk("v2/system.slice/slurmstepd.scope/system")
	mk("v2/system.slice/slurmstepd.scope/job_7/step_batch")
	mk("v2sluid/system.slice/slurmstepd.scope/system")
	mk("v2sluid/system.slice/slurmstepd.scope/s0123456789ABC/step_0")
	v1 := func(dir, ctrl string) Hierarchy {
		return Hierarchy{Version: V1, Mount: filepath.Join(root, dir), Controllers: []string{ctrl}}
	}
	j := SlurmJob{UID: 1000, JobID: "7", Node: "gn1", PID1V2: "/init.scope"}
	hs := []Hierarchy{v1("memory", "memory"), v1("cpuacct", "cpuacct"), v1("other", "cpu"), v1("twice", "cpu"), {Version: V2, Mount: filepath.Join(root, "v2")}}
	job, why := j.Find(hs)
	if why != "" {
		t.Fatal(why)
	}
	steps := job.Steps()
	var got []string
	for _, d := range job {
		got = append(got, strings.TrimPrefix(d.Path, root+"/"))
	}
	want := "memory/slurm_gn1/uid_1000/job_7 cpuacct/slurm/uid_1000/job_7 other/site_prefix/uid_1000/job_7 v2/system.slice/slurmstepd.scope/job_7"
	if strings.Join(got, " ") != want {
		t.Errorf("job dirs:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if s := strings.Join(SortedSteps(steps), ","); s != "0,1,batch" {
		t.Errorf("steps %s, want 0,1,batch (gn2's extern is another node's)", s)
	}
	if len(steps["batch"]) != 3 {
		t.Errorf("step batch in %d hierarchies, want 3 (memory, cpuacct, v2)", len(steps["batch"]))
	}

	j.SLUID = "s0123456789ABC"
	job, _ = j.Find([]Hierarchy{{Version: V2, Mount: filepath.Join(root, "v2sluid")}})
	steps = job.Steps()
	if len(job) != 1 || filepath.Base(job[0].Path) != "s0123456789ABC" || len(steps["0"]) != 1 {
		t.Errorf("26.05 SLUID dir: job %v steps %v", job, steps)
	}

	// Before gn1's first step of job 9 makes its group, gn2's (another
	// slurmd of the same host) is the only directory of the job: never
	// gn1's. A site's own prefix is still found.
	mk("memory/slurm_gn2/uid_1000/job_9/step_0")
	mk("cpuacct/site_prefix/uid_1000/job_9/step_0")
	j9 := j
	j9.JobID = "9"
	job, _ = j9.Find([]Hierarchy{v1("memory", "memory"), v1("cpuacct", "cpuacct")})
	if len(job) != 1 || !strings.HasSuffix(job[0].Path, "cpuacct/site_prefix/uid_1000/job_9") {
		t.Errorf("job 9 on gn1, only gn2's group and a site prefix's there: %v, want the site prefix's only", job)
	}

	j.JobID = "8"
	if _, why := j.Find(hs); !strings.Contains(why, "no Slurm cgroup of job 8") || !strings.Contains(why, "slurm_gn1/uid_1000/job_8") {
		t.Errorf("missing job: %q", why)
	}
	// No hierarchy at all (a container without /sys/fs/cgroup): the
	// reason says so rather than naming no place looked at.
	if job, why := j.Find(nil); len(job) != 0 || !strings.Contains(why, "no Slurm cgroup of job 8") || !strings.Contains(why, "no cgroup hierarchy") {
		t.Errorf("no hierarchy: %v %q", job, why)
	}
}

// TestOwn finds the calling process's own group only where its last
// element is the job's.
func TestOwn(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "mem/gym_otel/c/gn1/job_7"), 0o755)
	hs := []Hierarchy{{Version: V1, Mount: filepath.Join(root, "mem"), Controllers: []string{"memory"}}}
	self := Cgroups{V1: map[string]string{"memory": "/gym_otel/c/gn1/job_7"}}
	if ds, why := Own(hs, self, "7"); len(ds) != 1 || why != "" {
		t.Errorf("own: %v %q", ds, why)
	}
	if ds, why := Own(hs, self, "8"); len(ds) != 0 || !strings.Contains(why, "no cgroup of its own") {
		t.Errorf("another job's: %v %q", ds, why)
	}
}
