package cgroup

// What a job's cgroups cost, read at every scrape by the supervisor (as
// the job's user: every file read here is world-readable on v1 and v2).
//
// Where Slurm keeps a job's groups (read in Slurm's source,
// src/plugins/cgroup/v1/xcgroup.c and src/plugins/cgroup/v2/cgroup_v2.c):
//   - cgroup/v1: <mount>/<CgroupPrepend>/uid_<uid>/job_<id>/step_<step> in
//     each controller's hierarchy; CgroupPrepend is /slurm, or /slurm_%n
//     where Slurm was built for several slurmd per host (slurm_<node>).
//     The memory and cpuacct hierarchies hold them with
//     jobacct_gather/cgroup and task/cgroup; Slurm makes no group in the
//     cpu controller, nor in the v2 tree beside v1 controllers.
//   - cgroup/v2: <scope>/job_<id>/step_<step> in Slurm's delegated
//     slurmstepd scope (StepdScope); from 26.05 the job's directory is
//     named by its SLUID (s + 13 characters) unless cgroup.conf sets
//     CgroupJobIdPaths=yes.
//
// Steps are named by Slurm's step id without the job: batch, extern,
// interactive, 0, 1, 0+1 (het components). A group that exists is read;
// one that does not is reported as not kept, with the reason.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// Stat names: the quantities a group's reading may hold (Stats.Values
// keys), in their units.
const (
	// CPUSeconds is the CPU time used, seconds (v1 cpuacct.usage, v2
	// cpu.stat usage_usec).
	CPUSeconds = "cpu_usage_seconds"
	// CPUPeriods and CPUThrottledPeriods count the CFS bandwidth periods
	// and those the group was throttled in; CPUThrottledSeconds is the
	// time throttled, seconds (cpu.stat nr_periods, nr_throttled,
	// throttled_time ns on v1 / throttled_usec on v2).
	CPUPeriods          = "cpu_periods"
	CPUThrottledPeriods = "cpu_throttled_periods"
	CPUThrottledSeconds = "cpu_throttled_seconds"
	// MemoryCurrentBytes is the memory charged now (v1
	// memory.usage_in_bytes, v2 memory.current).
	MemoryCurrentBytes = "memory_current_bytes"
	// MemoryPeakBytes is the highest memory charged (v1
	// memory.max_usage_in_bytes, v2 memory.peak: Linux 5.19 and later).
	MemoryPeakBytes = "memory_peak_bytes"
	// MemoryLimitBytes is the hard bound (v1 memory.limit_in_bytes, v2
	// memory.max); absent when unbounded ("max" on v2, the v1 maximum).
	MemoryLimitBytes = "memory_limit_bytes"
	// OOMKills counts processes the kernel killed at the group's bound (v1
	// memory.oom_control oom_kill: Linux 4.13 and later, v2
	// memory.events oom_kill).
	OOMKills = "oom_kills"
	// <res>_pressure_<some|full>_seconds: the time some (all) of the
	// group's tasks stalled on the resource, seconds (v2 <res>.pressure
	// total=, µs; kept where the kernel runs PSI).
	CPUPressureSome    = "cpu_pressure_some_seconds"
	CPUPressureFull    = "cpu_pressure_full_seconds"
	MemoryPressureSome = "memory_pressure_some_seconds"
	MemoryPressureFull = "memory_pressure_full_seconds"
	IOPressureSome     = "io_pressure_some_seconds"
	IOPressureFull     = "io_pressure_full_seconds"
)

// Families group the stat names by what keeps them (vocab.CgroupFamilies):
// a family not kept is reported once (Stats.NotKept), not per name.
var Families = map[string][]string{
	vocab.CgroupFamilyCPUUsage:       {CPUSeconds},
	vocab.CgroupFamilyCPUThrottling:  {CPUPeriods, CPUThrottledPeriods, CPUThrottledSeconds},
	vocab.CgroupFamilyMemoryCurrent:  {MemoryCurrentBytes},
	vocab.CgroupFamilyMemoryPeak:     {MemoryPeakBytes},
	vocab.CgroupFamilyOOMKills:       {OOMKills},
	vocab.CgroupFamilyCPUPressure:    {CPUPressureSome, CPUPressureFull},
	vocab.CgroupFamilyMemoryPressure: {MemoryPressureSome, MemoryPressureFull},
	vocab.CgroupFamilyIOPressure:     {IOPressureSome, IOPressureFull},
}

// familyOrder is Families' keys in a stable order (vocab's).
var familyOrder = vocab.CgroupFamilies

// FamilyNames are the families in a stable order.
func FamilyNames() []string { return append([]string(nil), familyOrder...) }

// Stats is one group's reading: the values kept (by stat name) and, per
// family not kept anywhere in the group's hierarchies, the reason (one
// sentence). A family is in one of the two, never both, never neither;
// memory_limit_bytes is a value only (no bound is no reason).
type Stats struct {
	Values  map[string]float64
	NotKept map[string]string
}

// StatsDirs is one group's directories, one per hierarchy it has one in.
type StatsDirs []StatsDir

// StatsDir is a group's directory in one hierarchy.
type StatsDir struct {
	H    Hierarchy
	Path string
}

// statsControllers are the v1 controllers whose files Read uses.
var statsControllers = []string{"memory", "cpuacct", "cpu"}

// DiscoverStats reads the hierarchies whose files a group's reading uses
// from mountinfo: the v1 memory, cpuacct and cpu ones and the v2 one.
func DiscoverStats(mountinfo string) ([]Hierarchy, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hs, err := parseMountinfoFor(f, statsControllers)
	return hs, err
}

// Read reads the group's counters from its directories. Kernel, the
// running kernel's release (uname -r), only words a reason.
func (ds StatsDirs) Read(kernel string) Stats {
	st := Stats{Values: map[string]float64{}, NotKept: map[string]string{}}
	why := map[string]string{}
	note := func(fam, reason string) {
		if _, ok := why[fam]; !ok {
			why[fam] = reason
		}
	}
	hasV2 := false
	for _, d := range ds {
		switch d.H.Version {
		case V1:
			readV1(d, st.Values, note)
		case V2:
			hasV2 = true
			readV2(d, st.Values, note, kernel)
		}
	}
	for _, fam := range familyOrder {
		if kept(st.Values, fam) {
			continue
		}
		r := why[fam]
		switch {
		case r != "":
		case strings.HasSuffix(fam, "_pressure") && !hasV2:
			r = "cgroup v1 keeps no pressure (PSI is per cgroup on v2 only), and this group has no v2 directory"
		case fam == "cpu_throttling":
			r = "no directory of this group in a cpu controller's hierarchy (Slurm's cgroup/v1 makes none)"
		default:
			r = "no directory of this group in a hierarchy that keeps it"
		}
		st.NotKept[fam] = r
	}
	return st
}

func kept(v map[string]float64, fam string) bool {
	for _, n := range Families[fam] {
		if _, ok := v[n]; ok {
			return true
		}
	}
	return false
}

// v1Unlimited: memory.limit_in_bytes at or above this is no bound (the
// kernel reports PAGE_COUNTER_MAX pages, about 2^63 bytes).
const v1Unlimited = int64(1) << 62

func readV1(d StatsDir, v map[string]float64, note func(fam, reason string)) {
	set := func(name string, x float64) {
		if _, ok := v[name]; !ok {
			v[name] = x
		}
	}
	file := func(n string) string { return filepath.Join(d.Path, n) }
	if d.has("cpuacct") {
		if ns, err := readInt(file("cpuacct.usage")); err == nil {
			set(CPUSeconds, float64(ns)/1e9)
		} else {
			note("cpu_usage", reasonOf("cpuacct.usage", err))
		}
	}
	if d.has("cpu") {
		if s, err := readSmall(file("cpu.stat")); err == nil {
			kv := keyedAll(s)
			if p, ok := kv["nr_periods"]; ok {
				set(CPUPeriods, float64(p))
				set(CPUThrottledPeriods, float64(kv["nr_throttled"]))
				set(CPUThrottledSeconds, float64(kv["throttled_time"])/1e9)
			}
		} else {
			note("cpu_throttling", reasonOf("cpu.stat", err))
		}
	}
	if d.has("memory") {
		if n, err := readInt(file("memory.usage_in_bytes")); err == nil {
			set(MemoryCurrentBytes, float64(n))
		} else {
			note("memory_current", reasonOf("memory.usage_in_bytes", err))
		}
		if n, err := readInt(file("memory.max_usage_in_bytes")); err == nil {
			set(MemoryPeakBytes, float64(n))
		} else {
			note("memory_peak", reasonOf("memory.max_usage_in_bytes", err))
		}
		if n, err := readInt(file("memory.limit_in_bytes")); err == nil && n > 0 && n < v1Unlimited {
			set(MemoryLimitBytes, float64(n))
		}
		if s, err := readSmall(file("memory.oom_control")); err == nil {
			if n, ok := keyedAll(s)["oom_kill"]; ok {
				set(OOMKills, float64(n))
			} else {
				note("oom_kills", "memory.oom_control has no oom_kill count (Linux 4.13 and later keep it on v1)")
			}
		} else {
			note("oom_kills", reasonOf("memory.oom_control", err))
		}
	}
}

func readV2(d StatsDir, v map[string]float64, note func(fam, reason string), kernel string) {
	set := func(name string, x float64) {
		if _, ok := v[name]; !ok {
			v[name] = x
		}
	}
	file := func(n string) string { return filepath.Join(d.Path, n) }
	if s, err := readSmall(file("cpu.stat")); err == nil {
		kv := keyedAll(s)
		if n, ok := kv["usage_usec"]; ok {
			set(CPUSeconds, float64(n)/1e6)
		}
		if p, ok := kv["nr_periods"]; ok {
			set(CPUPeriods, float64(p))
			set(CPUThrottledPeriods, float64(kv["nr_throttled"]))
			set(CPUThrottledSeconds, float64(kv["throttled_usec"])/1e6)
		} else {
			note("cpu_throttling", "cpu.stat has no nr_periods: the cpu controller is not enabled for this group (cgroup.subtree_control of its parent)")
		}
	} else {
		note("cpu_usage", reasonOf("cpu.stat", err))
		note("cpu_throttling", reasonOf("cpu.stat", err))
	}
	memOff := !exists(file("memory.current"))
	if memOff {
		for _, fam := range []string{"memory_current", "memory_peak", "oom_kills"} {
			note(fam, "no memory.current: the memory controller is not enabled for this group (cgroup.subtree_control of its parent)")
		}
	} else {
		if n, err := readInt(file("memory.current")); err == nil {
			set(MemoryCurrentBytes, float64(n))
		} else {
			note("memory_current", reasonOf("memory.current", err))
		}
		if n, err := readInt(file("memory.peak")); err == nil {
			set(MemoryPeakBytes, float64(n))
		} else if errors.Is(err, os.ErrNotExist) {
			note("memory_peak", fmt.Sprintf("memory.peak needs Linux 5.19 or later (this kernel: %s)", orUnknown(kernel)))
		} else {
			note("memory_peak", reasonOf("memory.peak", err))
		}
		if s, err := readSmall(file("memory.max")); err == nil && strings.TrimSpace(s) != "max" {
			if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
				set(MemoryLimitBytes, float64(n))
			}
		}
		if s, err := readSmall(file("memory.events")); err == nil {
			if n, ok := keyedAll(s)["oom_kill"]; ok {
				set(OOMKills, float64(n))
			} else {
				note("oom_kills", "memory.events has no oom_kill count")
			}
		} else {
			note("oom_kills", reasonOf("memory.events", err))
		}
	}
	for _, res := range []string{"cpu", "memory", "io"} {
		some, full, err := readPressure(file(res + ".pressure"))
		fam := res + "_pressure"
		switch {
		case err == nil:
			set(res+"_pressure_some_seconds", some)
			if full >= 0 {
				set(res+"_pressure_full_seconds", full)
			}
		case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP):
			note(fam, fmt.Sprintf("the kernel keeps no pressure here: %s.pressure %s (PSI off: boot with psi=1, or a kernel without CONFIG_PSI)", res, shortErr(err)))
		default:
			note(fam, reasonOf(res+".pressure", err))
		}
	}
}

// readPressure reads a PSI file's totals, seconds: some, and full (-1
// when the file has no full line: cpu.pressure before Linux 5.13).
func readPressure(p string) (some, full float64, err error) {
	s, err := readSmall(p)
	if err != nil {
		return 0, 0, err
	}
	some, full = -1, -1
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		for _, kv := range f[1:] {
			if t, ok := strings.CutPrefix(kv, "total="); ok {
				n, err := strconv.ParseInt(t, 10, 64)
				if err != nil {
					return 0, 0, fmt.Errorf("%s: %q: %w", p, kv, err)
				}
				switch f[0] {
				case "some":
					some = float64(n) / 1e6
				case "full":
					full = float64(n) / 1e6
				}
			}
		}
	}
	if some < 0 {
		return 0, 0, fmt.Errorf("%s: no some line", p)
	}
	return some, full, nil
}

// keyedAll parses "key N" lines (cpu.stat, memory.events, oom_control).
func keyedAll(s string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				out[f[0]] = n
			}
		}
	}
	return out
}

func reasonOf(file string, err error) string {
	return fmt.Sprintf("%s: %s", file, shortErr(err))
}

func shortErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, os.ErrNotExist) {
		return "absent"
	}
	return err.Error()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func (d StatsDir) has(ctrl string) bool { return dir{h: d.H}.has(ctrl) }

// SlurmJob names a job's cgroups as Slurm makes them on a node.
type SlurmJob struct {
	// UID is the job's user (v1 uid_<uid>).
	UID int
	// JobID is the job id; SLUID its SLUID ("" before Slurm 25.11),
	// the name of its v2 directory on 26.05 and later.
	JobID, SLUID string
	// Node is the node's name (slurm_<node>, <node>_slurmstepd.scope
	// where Slurm runs several slurmd per host).
	Node string
	// PID1V2 is PID 1's path in the v2 tree ("/init.scope"; "" or "/"
	// without systemd): where Slurm's scope is looked for.
	PID1V2 string
}

// Find returns the job's group: its directory in each hierarchy of hs
// that has one. An empty group comes with the reason: where it was looked
// for.
func (j SlurmJob) Find(hs []Hierarchy) (job StatsDirs, why string) {
	var looked []string
	seen := map[Version]bool{}
	for _, h := range hs {
		p, l := j.jobDir(h)
		if !seen[h.Version] {
			// The first hierarchy of each version says where.
			seen[h.Version] = true
			looked = append(looked, l...)
		}
		if p != "" {
			job = append(job, StatsDir{H: h, Path: p})
		}
	}
	if len(hs) == 0 {
		why = fmt.Sprintf("no Slurm cgroup of job %s on this node: no cgroup hierarchy Slurm keeps a job's usage in (v1 memory, cpuacct or cpu, or v2) is mounted here", j.JobID)
	} else if len(job) == 0 {
		why = fmt.Sprintf("no Slurm cgroup of job %s on this node (Slurm's cgroup plugins not in use, or the job's first step not started yet); looked for %s (and alike in the other hierarchies)", j.JobID, strings.Join(looked, ", "))
	}
	return job, why
}

// Exists reports whether the group still has its first directory (a
// job's group goes when the job ends).
func (ds StatsDirs) Exists() bool { return len(ds) > 0 && isDir(ds[0].Path) }

// Steps returns the step groups below a job's group by step name
// ("batch", "extern", "0", ...), each in the hierarchies that have it.
func (ds StatsDirs) Steps() map[string]StatsDirs {
	steps := map[string]StatsDirs{}
	for _, d := range ds {
		ents, err := os.ReadDir(d.Path)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if name, ok := strings.CutPrefix(e.Name(), "step_"); ok && e.IsDir() {
				steps[name] = append(steps[name], StatsDir{H: d.H, Path: filepath.Join(d.Path, e.Name())})
			}
		}
	}
	return steps
}

// jobDir is the job's directory in h ("" when none) and what was looked for.
func (j SlurmJob) jobDir(h Hierarchy) (string, []string) {
	name := GroupName(j.JobID) // Slurm's name, which the plugin's group shares
	if h.Version == V1 {
		sub := filepath.Join("uid_"+strconv.Itoa(j.UID), name)
		var cands []string
		if safeName(j.Node) {
			cands = append(cands, filepath.Join(h.Mount, "slurm_"+j.Node, sub))
		}
		cands = append(cands, filepath.Join(h.Mount, "slurm", sub))
		for _, c := range cands {
			if isDir(c) {
				return c, cands
			}
		}
		// Another CgroupPrepend: one match, never a guess between
		// several (two slurmd of one host each have the job's group).
		// Where this node's own name can be looked for, a slurm_<name>
		// directory is another node's (CgroupPrepend=/slurm_%n on a host
		// of several slurmd): before this node's first step of the job
		// makes its group, the other node's is the only match.
		m, _ := filepath.Glob(filepath.Join(h.Mount, "*", sub))
		if safeName(j.Node) {
			m = slices.DeleteFunc(m, func(p string) bool {
				return strings.HasPrefix(filepath.Base(filepath.Dir(filepath.Dir(p))), "slurm_")
			})
		}
		if len(m) == 1 && isDir(m[0]) {
			return m[0], cands
		}
		return "", append(cands, filepath.Join(h.Mount, "*", sub))
	}
	scope, looked := StepdScope(h.Mount, j.PID1V2, j.Node)
	if scope == "" {
		return "", looked
	}
	names := []string{name}
	if len(j.SLUID) == 14 && safeName(j.SLUID) {
		names = append([]string{j.SLUID}, names...)
	}
	var cands []string
	for _, n := range names {
		c := filepath.Join(scope, n)
		cands = append(cands, c)
		if isDir(c) {
			return c, cands
		}
	}
	return "", cands
}

// Own returns the directories of the calling process's own group whose
// last element is job_<jobID> (the plugin's group of the job: the
// supervisor is born inside it), and "" or why there is none.
func Own(hs []Hierarchy, self Cgroups, jobID string) (StatsDirs, string) {
	var out StatsDirs
	for _, h := range hs {
		p, ok := self.pathIn(h)
		if !ok || filepath.Base(p) != GroupName(jobID) {
			continue
		}
		d := filepath.Join(h.Mount, p)
		if isDir(d) {
			out = append(out, StatsDir{H: h, Path: d})
		}
	}
	if len(out) == 0 {
		return nil, "the collector has no cgroup of its own on this node (plugstack cgroup=off, or no writable cgroup hierarchy)"
	}
	return out, ""
}

// SortedSteps returns the step names of steps in a stable order.
func SortedSteps(steps map[string]StatsDirs) []string {
	var names []string
	for n := range steps {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func safeName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00*?[")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// KernelRelease is uname -r ("" when unknown).
func KernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
