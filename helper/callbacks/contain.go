package callbacks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/memory"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// CgroupMemoryFactor sets a job group's memory bound at the prolog:
// CgroupMemoryFactor x otel.memory_limit_mib (the collector's own soft
// limit), never above the site's cap (cgroup_memory_max_mib). The job's
// first step on the node (the extern step with PrologFlags=Contain)
// lowers it to the job's memory on the node when Slurm knows one
// (spank/cgroup.c, S_JOB_ALLOC_MEM).
//
// The prolog cannot use the job's memory: it has none to read. On Slurm
// 22.05, 24.11 and 26.05 slurmd's _rpc_prolog (src/slurmd/slurmd/req.c)
// keeps the job's memory in its own memory (_make_prolog_mem_container:
// job_mem_limit_register), runs the prolog (prep/script execs `slurmstepd
// spank prolog` with the environment of prep_script_slurmd.c's _build_env,
// which holds no memory value; in that job_script context SPANK gives
// only S_JOB_UID, S_JOB_GID and S_JOB_ID), and only then spawns the extern
// step (_spawn_prolog_stepd), whose slurmstepd runs this plugin's
// init_post_opt (the lowering) before task/cgroup makes Slurm's job cgroup
// and its memory limit (task_g_pre_setuid): no Slurm job cgroup exists
// while the prolog runs. Under PrologFlags=RunInJob the prolog runs in the
// extern step after that cgroup exists, but slurmstepd runs no SPANK job
// prolog there (spank.c sets has_prolog only in slurmd's stack), so no
// collector starts (refused at submit, spank/submit.c). The window from
// the collector's start to the extern step is bounded by this bound and
// the site's cap only; a site closes it by setting cgroup_memory_max_mib
// at or below the least memory a job gets on a node. Without Contain the
// window lasts until the node's first step: on a node where the job runs
// no step, for the job's life.
const CgroupMemoryFactor = memory.GroupFactor

// cgroupMemoryBytes is the memory bound of a job's group at the prolog,
// bytes: the memory policy's (memory.Of) of memMiB (the settings'
// memory_limit_mib, already validated) under the cap capMiB; capped says
// the cap decided it.
func cgroupMemoryBytes(memMiB, capMiB int) (n int64, capped bool) {
	p := memory.Of(memMiB, capMiB)
	return p.GroupBytes, p.GroupCapped
}

// Values of the plugstack argument cgroup=.
const (
	// CgroupAuto: a group wherever the node mounts a writable cgroup
	// hierarchy, and no collector there without it; on a node that mounts
	// none (an unprivileged container), the collector runs without one,
	// with a warning.
	CgroupAuto = "auto"
	// CgroupRequired: no collector on a node without its group, whatever
	// the node mounts.
	CgroupRequired = "required"
	// CgroupOff: never a group (the session and subreaper only).
	CgroupOff = "off"
)

// mountinfo is read to find the node's cgroup hierarchies.
var mountinfo = "/proc/self/mountinfo"

// jobGroup creates the job's cgroup on this node (see helper/cgroup) with
// the memory bound memBytes. It returns nil without an error when
// cgroup=off, and when cgroup=auto on a node that mounts no writable
// hierarchy or is a systemd host with a unified tree and no delegated
// slurmstepd scope (cgroup.Place; logged, naming why: the collector runs
// without its group). Everywhere
// else a group that cannot be made (after cgroup.CreateAttempts tries) is
// an error, naming the setting: no collector starts without its group.
func jobGroup(a Args, cluster, node string, jobID uint32, memBytes int64, log logrus.FieldLogger) (*cgroup.Group, error) {
	if a.Cgroup == CgroupOff {
		return nil, nil
	}
	rel, err := cgroup.JobPath(cluster, node, jobID)
	if err != nil {
		return nil, fmt.Errorf("the collector's cgroup (plugstack cgroup=%s): %w", a.Cgroup, err)
	}
	hs, err := cgroup.Discover(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("the collector's cgroup (plugstack cgroup=%s): the node's mounts: %w", a.Cgroup, err)
	}
	usable := cgroup.Writable(hs)
	if len(usable) > 0 {
		// On a systemd host with a unified tree: in Slurm's delegated
		// slurmstepd scope, or nowhere.
		placed, err := placeGroups(usable, node)
		if errors.Is(err, cgroup.ErrNoDelegatedScope) && a.Cgroup != CgroupRequired {
			log.Warnf("job %d: no cgroup for the collector on %s (%v): it runs without a memory bound or device list, and a process it leaves that escapes its session can outlive the job; set cgroup=required to refuse instead", jobID, node, err)
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("the collector's cgroup (plugstack cgroup=%s) on %s: %w", a.Cgroup, node, err)
		}
		usable = placed
	}
	if len(usable) == 0 {
		why := "no cgroup hierarchy is mounted"
		if len(hs) > 0 {
			why = fmt.Sprintf("the node's %d cgroup hierarchies are mounted read-only", len(hs))
		}
		if a.Cgroup == CgroupRequired {
			return nil, fmt.Errorf("the collector's cgroup (plugstack cgroup=required): %s on %s", why, node)
		}
		log.Warnf("job %d: no cgroup for the collector on %s (%s): it runs without a memory bound, and a process it leaves that escapes its session can outlive the job; set cgroup=required to refuse instead", jobID, node, why)
		return nil, nil
	}
	if memBytes <= 0 {
		return nil, fmt.Errorf("the collector's cgroup (plugstack cgroup=%s): memory bound %d bytes: refusing a group without a bound", a.Cgroup, memBytes)
	}
	g, err := cgroup.Create(usable, rel, cgroup.Limits{MemoryBytes: memBytes})
	if err != nil {
		return nil, fmt.Errorf("the collector's cgroup (plugstack cgroup=%s: no collector without its group on a node that mounts cgroups): %w", a.Cgroup, err)
	}
	if !g.Anchored() {
		if a.Cgroup == CgroupRequired {
			_ = g.Remove()
			return nil, fmt.Errorf("the collector's cgroup (plugstack cgroup=required): %s has no hierarchy its processes cannot leave (cgroup v2, or the v1 pids controller) on %s: a process could move itself into the job's own step cgroups, out of reach of the job's end", g.Rel, node)
		}
		log.Warnf("job %d: the collector's cgroup %s has no hierarchy its processes cannot leave (mount cgroup v2 or the v1 pids controller): a process could move itself into the job's own step cgroups, where the epilog does not look; set cgroup=required to refuse instead", jobID, g.Rel)
	}
	if len(g.Retried) > 0 {
		log.Warnf("job %d: the collector's cgroup %s was made at attempt %d of %d (before: %v)", jobID, g.Rel, len(g.Retried)+1, cgroup.CreateAttempts, errors.Join(g.Retried...))
	}
	return g, nil
}

// openJobGroup finds the job's cgroup on this node as it exists (empty when
// none).
func openJobGroup(cluster, node string, jobID uint32) *cgroup.Group {
	rel, err := cgroup.JobPath(cluster, node, jobID)
	if err != nil {
		return &cgroup.Group{}
	}
	return cgroup.Open(nodeHierarchies(node), rel)
}

// nodeHierarchies are the node's cgroup hierarchies, each with the
// directory the plugin's groups are made below (cgroup.Place: Slurm's
// delegated scope on a systemd host with a unified tree); nil when none
// is known (a systemd host without the scope has no group to find).
func nodeHierarchies(node string) []cgroup.Hierarchy {
	hs, err := cgroup.Discover(mountinfo)
	if err != nil {
		return nil
	}
	placed, err := placeGroups(hs, node)
	if err != nil {
		return nil
	}
	return placed
}

// placeGroups is cgroup.Place (a test's stand-in replaces it).
var placeGroups = cgroup.Place

// errGroupLeft marks a job group that could not be ended by the deadline
// of the prolog or epilog that tried: it stays, for a later sweep.
var errGroupLeft = errors.New("left for the next prolog's or epilog's sweep of orphaned cgroups")

// endJobGroup kills whatever is left in the job's group on this node and
// removes it, logging what the group cost, all by ctx's deadline (without
// one: GroupKillBound + RemoveReserve from now). The kill gets at most
// timing.GroupKillBound and never the last timing.RemoveReserve before the
// deadline (one round of it at least: a write to cgroup.kill, or a freeze
// and SIGKILLs, about 0.1 s); the removal of its directories, up to seven,
// at most timing.RemoveReserve and never past the deadline, each rmdir
// retried while a dying task keeps the group busy (tried once when the kill
// left processes: it fails EBUSY then however long it waits). A group
// not removed by then stays where it is, and the error wraps errGroupLeft:
// the next prolog's or epilog's sweep of orphaned groups takes it.
func endJobGroup(ctx context.Context, g *cgroup.Group, jobID uint32, log logrus.FieldLogger) error {
	if !g.Exists() {
		return nil
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(timing.GroupKillBound + timing.RemoveReserve)
	}
	u := g.Usage()
	// A supervisor that has just exited is a zombie in the group until
	// its parent (PID 1 or a subreaper) reaps it: not a process left.
	left := running(g.Pids())
	n, kerr := g.Kill(max(0, min(timing.GroupKillBound, time.Until(deadline)-timing.RemoveReserve)))
	if n > 0 && len(left) > 0 && kerr == nil {
		log.Warnf("job %d: killed %d processes left in the collector's cgroup %s after the drain (%s)", jobID, len(left), g.Rel, leftProcesses(left, 4))
	}
	log.Infof("job %d: collector cgroup %s: peak memory %.1f MiB (bound %.0f MiB), CPU %.2f s, %d OOM kills, CPUs %s",
		jobID, g.Rel, float64(u.MemoryPeakBytes)/(1<<20), float64(u.MemoryLimitBytes)/(1<<20), u.CPUSeconds, u.OOMKills, u.CPUs)
	removeBy := time.Now().Add(timing.RemoveReserve)
	if deadline.Before(removeBy) {
		removeBy = deadline
	}
	if kerr != nil {
		removeBy = time.Now()
	}
	rerr := g.RemoveBy(removeBy)
	if g.Exists() {
		return fmt.Errorf("cgroup %s not ended by the deadline (directories left: %d), %w: %w", g.Rel, len(g.Dirs()), errGroupLeft, errors.Join(kerr, rerr))
	}
	return errors.Join(kerr, rerr)
}

// running is pids less those that have exited (zombies, or gone:
// notExited).
func running(pids []int) []int {
	return slices.DeleteFunc(pids, func(pid int) bool { return !notExited(pid) })
}

// leftProcesses names at most max of pids as "comm pid, ..." (their
// /proc/<pid>/comm, the user's choice of name: quoted), for the log line
// of what the drain left.
func leftProcesses(pids []int, max int) string {
	var b strings.Builder
	for i, pid := range pids {
		if i == max {
			fmt.Fprintf(&b, ", and %d more", len(pids)-max)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		c, _ := proc.Comm(pid)
		fmt.Fprintf(&b, "%q %d", c, pid)
	}
	return b.String()
}
