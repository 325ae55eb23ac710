package supervise

// The job's cgroups as metrics.
//
// The supervisor reads what the job's cgroups on this node have cost
// (helper/cgroup's stats.go: Slurm's job and step groups, and the
// collector's own group) every scrape_interval_seconds and pushes the
// reading to the collector (nodemetrics.go), so the series carry the
// run's identity like every other.
//
// Why here and not in a collector receiver: no receiver of the collector
// (core or contrib) reads a given cgroup directory. hostmetrics reads the
// host and processes (a process's cgroup only as a label), docker_stats,
// podman_stats and kubeletstats ask a container runtime, and Splunk's
// cgroups monitor (not in contrib) reads v1 only. Slurm's groups move by
// release, plugin and cgroup.conf (slurm_<node>, uid_<uid>, job_<id> or
// the SLUID on 26.05), which a static configuration cannot follow, and
// "not kept here" needs a reason a receiver would not give. The
// supervisor is already there for the job's whole life, as the job's
// user (every file read is world-readable), and costs nothing to a job
// without the flag: it exists only for flagged jobs.
//
// What is not kept on this node (cgroup v1 has no pressure, memory.peak
// needs Linux 5.19, PSI may be off, Slurm makes no cpu-controller group
// on v1, the job's group does not exist before its first step) is never
// a 0: the series is absent, and cgroup_not_kept{cgroup, step, family,
// reason} 1 says why.

import (
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// MaxCgroupSteps bounds the step groups read per reading (a job's steps
// on a node at one time; ended steps' groups are gone). The rest are
// counted in one cgroup_not_kept series.
const MaxCgroupSteps = 64

// maxReasonBytes bounds a point's attribute value as pushed (a reason is
// the long one).
const maxReasonBytes = 512

// cgroupMetric is one metric family of the text.
type cgroupMetric struct {
	stat, name, typ, help string
}

// cgroupMetricFamilies are the families served, in order: the stat read
// (cgroup.Stats.Values key), the Prometheus name, type and help.
var cgroupMetricFamilies = []cgroupMetric{
	{cgroup.CPUSeconds, vocab.CgroupCPUSeconds, "counter", "CPU time used by the group, seconds."},
	{cgroup.CPUPeriods, vocab.CgroupCPUPeriods, "counter", "CFS bandwidth periods of the group."},
	{cgroup.CPUThrottledPeriods, vocab.CgroupThrottledPeriods, "counter", "CFS bandwidth periods in which the group was throttled."},
	{cgroup.CPUThrottledSeconds, vocab.CgroupThrottledSeconds, "counter", "Time the group was throttled, seconds."},
	{cgroup.MemoryCurrentBytes, vocab.CgroupMemoryCurrent, "gauge", "Memory charged to the group now, bytes."},
	{cgroup.MemoryPeakBytes, vocab.CgroupMemoryPeak, "gauge", "Highest memory charged to the group, bytes."},
	{cgroup.MemoryLimitBytes, vocab.CgroupMemoryLimit, "gauge", "The group's hard memory bound, bytes (absent: none)."},
	{cgroup.OOMKills, vocab.CgroupOOMKills, "counter", "Processes the kernel killed at the group's memory bound."},
	{cgroup.CPUPressureSome, vocab.CgroupCPUPressureSome, "counter", "Time some of the group's tasks stalled on CPU, seconds (PSI)."},
	{cgroup.CPUPressureFull, vocab.CgroupCPUPressureFull, "counter", "Time all of the group's tasks stalled on CPU, seconds (PSI)."},
	{cgroup.MemoryPressureSome, vocab.CgroupMemoryPressureSome, "counter", "Time some of the group's tasks stalled on memory, seconds (PSI)."},
	{cgroup.MemoryPressureFull, vocab.CgroupMemoryPressureFull, "counter", "Time all of the group's tasks stalled on memory, seconds (PSI)."},
	{cgroup.IOPressureSome, vocab.CgroupIOPressureSome, "counter", "Time some of the group's tasks stalled on IO, seconds (PSI)."},
	{cgroup.IOPressureFull, vocab.CgroupIOPressureFull, "counter", "Time all of the group's tasks stalled on IO, seconds (PSI)."},
}

// cgroupReader reads one node's groups of one job.
type cgroupReader struct {
	hs      []cgroup.Hierarchy
	job     cgroup.SlurmJob
	own     cgroup.StatsDirs
	ownWhy  string
	kernel  string
	stepMax int
	// The job's group once found (Find globs directories: at every
	// reading while it is not found, then at most once per jobSearchEvery
	// while it is not found in every hierarchy).
	jobDirs    cgroup.StatsDirs
	jobWhy     string
	searchedAt time.Time
}

// jobSearchEvery is how often a job group found in some hierarchies but
// not in every one is looked for again.
const jobSearchEvery = 5 * time.Second

// newCgroupReader finds the node's hierarchies and the supervisor's own
// group (the collector's) for job f; Slurm's groups are looked up at
// every read (they appear with the job's first step).
func newCgroupReader(f jobfacts.Facts) (*cgroupReader, error) {
	hs, err := cgroup.DiscoverStats("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	r := &cgroupReader{hs: hs, kernel: cgroup.KernelRelease(), stepMax: MaxCgroupSteps,
		job: cgroup.SlurmJob{UID: os.Getuid(), JobID: f.JobID, SLUID: f.SLUID, Node: f.Node}}
	if pid1, err := cgroup.ProcCgroups("1"); err == nil {
		r.job.PID1V2 = pid1.V2
	}
	self, err := cgroup.ProcCgroups("self")
	if err != nil {
		r.ownWhy = "the supervisor's own cgroup: " + err.Error()
	} else {
		r.own, r.ownWhy = cgroup.Own(hs, self, f.JobID)
	}
	return r, nil
}

// group is one group's place in the text and its reading (why: the whole
// group is not kept).
type cgroupGroup struct {
	kind, step string
	st         cgroup.Stats
	why        string
}

// read reads every group now.
func (r *cgroupReader) read() []cgroupGroup {
	var gs []cgroupGroup
	// Looked for again at every reading while not found (the first
	// reading, at the collector's readiness, comes before the job's first
	// step makes it), and while found in fewer hierarchies than the node
	// has: Slurm makes the job's directory in each hierarchy on its own
	// (task/cgroup's memory one at the first step, jobacct_gather's
	// cpuacct one a moment later), so a group first seen in one may appear
	// in another after. The readings come only from the supervisor's own
	// schedule (nodemetrics.go): at most one per scrape interval, and the
	// final scrape's and the drain's.
	if !r.jobDirs.Exists() || len(r.jobDirs) < len(r.hs) && time.Since(r.searchedAt) >= jobSearchEvery {
		dirs, why := r.job.Find(r.hs)
		if !r.jobDirs.Exists() || len(dirs) >= len(r.jobDirs) {
			r.jobDirs, r.jobWhy = dirs, why
		}
		r.searchedAt = time.Now()
	}
	if !r.jobDirs.Exists() {
		why := r.jobWhy
		if why == "" {
			why = fmt.Sprintf("the Slurm cgroup of job %s on this node is gone (the job is ending)", r.job.JobID)
		}
		gs = append(gs, cgroupGroup{kind: vocab.CgroupJob, why: why})
	} else {
		gs = append(gs, cgroupGroup{kind: vocab.CgroupJob, st: r.jobDirs.Read(r.kernel)})
		steps := r.jobDirs.Steps()
		names := cgroup.SortedSteps(steps)
		for i, n := range names {
			if i == r.stepMax {
				gs = append(gs, cgroupGroup{kind: vocab.CgroupStep, why: fmt.Sprintf("%d more step groups than %d on this node now: not read", len(names)-r.stepMax, r.stepMax)})
				break
			}
			gs = append(gs, cgroupGroup{kind: vocab.CgroupStep, step: n, st: steps[n].Read(r.kernel)})
		}
	}
	if r.ownWhy != "" {
		gs = append(gs, cgroupGroup{kind: vocab.CgroupCollector, why: r.ownWhy})
	} else {
		gs = append(gs, cgroupGroup{kind: vocab.CgroupCollector, st: r.own.Read(r.kernel)})
	}
	return gs
}

// cgroupFamilies turns gs into metric families: each family of
// cgroupMetricFamilies that some group keeps, then vocab.CgroupNotKept
// (always, with a point per family a group does not keep).
func cgroupFamilies(gs []cgroupGroup) []family {
	var fams []family
	for _, m := range cgroupMetricFamilies {
		for _, g := range gs {
			if v, ok := g.st.Values[m.stat]; ok {
				fams = addPoint(fams, m.name, m.help, m.typ == "counter", point{labels: groupLabels(g), value: v})
			}
		}
	}
	notKept := family{name: vocab.CgroupNotKept, help: "What this node does not keep for the group (family \"all\": the whole group), and why; 1 per family."}
	for _, g := range gs {
		if g.why != "" {
			notKept.points = append(notKept.points, point{labels: append(groupLabels(g), [2]string{vocab.LabelFamily, vocab.CgroupFamilyAll}, [2]string{vocab.LabelReason, g.why}), value: 1})
			continue
		}
		for _, fam := range cgroup.FamilyNames() {
			if why, ok := g.st.NotKept[fam]; ok {
				notKept.points = append(notKept.points, point{labels: append(groupLabels(g), [2]string{vocab.LabelFamily, fam}, [2]string{vocab.LabelReason, why}), value: 1})
			}
		}
	}
	return append(fams, notKept)
}

// groupLabels are a group's attributes: cgroup, and step for a step's.
func groupLabels(g cgroupGroup) [][2]string {
	if g.kind == vocab.CgroupStep && g.step != "" {
		return [][2]string{{vocab.LabelCgroup, g.kind}, {vocab.LabelStep, g.step}}
	}
	return [][2]string{{vocab.LabelCgroup, g.kind}}
}

// clipLabel is s, at most maxReasonBytes (cut before a rune that would
// cross the bound): nodemetrics.go applies it to every attribute value.
func clipLabel(s string) string {
	if len(s) <= maxReasonBytes {
		return s
	}
	n := maxReasonBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
