package plugin

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
)

// CgroupBase is the directory, below each cgroup hierarchy's mount, that
// holds the plugin's groups: <mount>/gym_otel/<cluster>/<node>/job_<id>
// (job ids are per cluster; <cluster> is SLURM_CLUSTER_NAME).
const CgroupBase = "gym_otel"

// groupBase is CgroupBase/<cluster>, or CgroupBase without a usable
// cluster name.
func groupBase(cluster string) string {
	if cluster == "" || strings.ContainsAny(cluster, "/\x00") || cluster == "." || cluster == ".." {
		return CgroupBase
	}
	return CgroupBase + "/" + cluster
}

// CgroupMemoryFactor sets a job group's memory bound at the prolog:
// CgroupMemoryFactor x otel.memory_limit_mib (the collector's own soft
// limit). The job's first step on the node lowers it to the job's memory
// on the node when Slurm knows one (spank/step.c, S_JOB_ALLOC_MEM).
const CgroupMemoryFactor = 2

// Values of the plugstack argument cgroup=.
const (
	CgroupAuto     = "auto"     // a group when the node can make one, else a warning
	CgroupRequired = "required" // no collector on a node that cannot make one
	CgroupOff      = "off"      // never (the session and subreaper only)
)

// mountinfo is read to find the node's cgroup hierarchies.
var mountinfo = "/proc/self/mountinfo"

// jobGroup creates the job's cgroup on this node (see helper/cgroup), or
// returns nil when cgroup=off, or when the node cannot make one and
// cgroup=auto (logged). The error names why with cgroup=required.
func jobGroup(a Args, cluster, node string, jobID uint32, o config.Otel, log logrus.FieldLogger) (*cgroup.Group, error) {
	if a.Cgroup == CgroupOff {
		return nil, nil
	}
	g, err := func() (*cgroup.Group, error) {
		rel, err := cgroup.RelPath(groupBase(cluster), node, jobID)
		if err != nil {
			return nil, err
		}
		hs, err := cgroup.Discover(mountinfo)
		if err != nil {
			return nil, err
		}
		return cgroup.Create(hs, rel, cgroup.Limits{MemoryBytes: int64(o.MemoryLimitMiB) * CgroupMemoryFactor << 20})
	}()
	if err == nil {
		return g, nil
	}
	if a.Cgroup == CgroupRequired {
		return nil, fmt.Errorf("the collector's cgroup (plugstack cgroup=required): %w", err)
	}
	log.Warnf("job %d: no cgroup for the collector on %s (%v): it runs without a memory bound, and a process it leaves that escapes its session can outlive the job; set cgroup=required to refuse instead", jobID, node, err)
	return nil, nil
}

// openJobGroup finds the job's cgroup on this node as it exists (empty when
// none).
func openJobGroup(cluster, node string, jobID uint32) *cgroup.Group {
	rel, err := cgroup.RelPath(groupBase(cluster), node, jobID)
	if err != nil {
		return &cgroup.Group{}
	}
	hs, _ := cgroup.Discover(mountinfo)
	return cgroup.Open(hs, rel)
}

// endJobGroup kills whatever is left in the job's group on this node and
// removes it, logging what the group cost. Bounded by about 5 s.
func endJobGroup(g *cgroup.Group, jobID uint32, log logrus.FieldLogger) error {
	if !g.Exists() {
		return nil
	}
	u := g.Usage()
	n, kerr := g.Kill(5 * time.Second)
	if n > 0 {
		log.Warnf("job %d: killed %d processes left in the collector's cgroup %s after the drain", jobID, n, g.Rel)
	}
	log.Infof("job %d: collector cgroup %s: peak memory %.1f MiB (bound %.0f MiB), CPU %.2f s, %d OOM kills, CPUs %s",
		jobID, g.Rel, float64(u.MemoryPeakBytes)/(1<<20), float64(u.MemoryLimitBytes)/(1<<20), u.CPUSeconds, u.OOMKills, u.CPUs)
	return errors.Join(kerr, g.Remove())
}
