package callbacks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// Epilog stops the job's supervisor on this node, ends what is left of the
// job's collector cgroup, and removes the record dir. The supervisor is
// signalled only when /proc still shows the pid the prolog started (same
// uid and start time, and inside the job's cgroup when the node has one);
// it drains the collector on SIGTERM, within the record's drain bound.
// Then everything still in the job's cgroup is killed (cgroup.kill, or
// freezer and SIGKILL), whatever it did to escape its session; on a node
// without a cgroup, the supervisor's session is SIGKILLed instead. Last,
// with what is left of its deadline (at most timing.EpilogSweepBound), it
// ends orphaned groups of earlier jobs on the node.
//
// All of it runs within one deadline taken when it starts:
// timing.Deadline(a.PrologTimeout, Slurm's EpilogTimeout from SLURM_CONF's
// slurm.conf), so Slurm never kills the epilog and drains the node. Each
// step takes only what is left of it: the drain wait stops where the kill
// (timing.GroupKillBound) and the removal (timing.RemoveReserve) still fit,
// the kill and the removal stop at the deadline. A group not ended by then
// is left, logged, for the next prolog's or epilog's sweep of orphaned
// groups; the record dir is removed anyway. The returned error is for the
// log only: the epilog always returns 0 to Slurm.
//
// getenv reads the epilog's environment as the C front left it (its start
// stamp, launch.EnvEpilogStart; nil: os.Getenv).
func Epilog(a Args, cluster, node string, jobID uint32, getenv func(string) string, log logrus.FieldLogger) error {
	pt := a.PrologTimeout
	if pt <= 0 {
		pt = DefaultPrologTimeout
	}
	budget := timing.Deadline(time.Duration(pt)*time.Second, slurm.ReadTimeouts(os.Getenv("SLURM_CONF")).Epilog)
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	if getenv == nil {
		getenv = os.Getenv
	}
	epilogStart = launch.ParsePrologStart(getenv(launch.EnvEpilogStart))
	jobExit = launch.JobExitFromEnv(getenv)
	return epilog(ctx, a.RecordDir, cluster, node, jobID, log)
}

// epilog is Epilog within ctx's deadline.
func epilog(ctx context.Context, recordDir, cluster, node string, jobID uint32, log logrus.FieldLogger) error {
	start := time.Now()
	err := endJob(ctx, recordDir, cluster, node, jobID, log)
	if errors.Is(err, errGroupLeft) {
		log.Warnf("job %d: %v", jobID, err)
		err = nil
	}
	if deadline, ok := ctx.Deadline(); ok {
		sctx, done := context.WithTimeout(ctx, min(time.Until(deadline), timing.EpilogSweepBound))
		sweepOrphanGroups(sctx, recordDir, cluster, node, jobID, log)
		done()
		log.Infof("job %d: epilog done in %d ms of its %s deadline", jobID, time.Since(start).Milliseconds(), deadline.Sub(start).Round(time.Second))
	}
	return err
}

// endJob is the epilog's own job's part: drain, kill, remove, record.
func endJob(ctx context.Context, recordDir, cluster, node string, jobID uint32, log logrus.FieldLogger) error {
	dir := record.JobDir(recordDir, node, jobID)
	group := openJobGroup(cluster, node, jobID)
	if err := record.CheckRootDir(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return endJobGroup(ctx, group, jobID, log)
		}
		return errors.Join(err, endJobGroup(ctx, group, jobID, log))
	}
	rec, rerr := record.Read(dir)
	if rerr == nil && rec.Status == record.StatusReady && rec.SupervisorPID > 1 {
		stopSupervisor(ctx, rec, group, jobID, log)
	}
	gerr := endJobGroup(ctx, group, jobID, log)
	if rerr == nil {
		// The collector is gone: its ports are free for anyone again.
		releasePorts(ctx, rec, node, jobID, log)
	}
	if err := os.RemoveAll(dir); err != nil {
		return errors.Join(rerr, gerr, err)
	}
	if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return errors.Join(fmt.Errorf("job %d: record: %w", jobID, rerr), gerr)
	}
	return gerr
}

// isOurs reports whether rec's supervisor pid still names the process the
// prolog started: same real uid and start time, not a zombie, and inside
// the job's cgroup when there is one (a reused pid is in none of ours).
func isOurs(rec *record.Record, g *cgroup.Group) bool {
	ps, err := proc.ReadStat(rec.SupervisorPID)
	if err != nil || ps.State == 'Z' || ps.StartTime != rec.SupervisorStart {
		return false
	}
	if uid, err := proc.RealUID(rec.SupervisorPID); err != nil || uid != rec.UID {
		return false
	}
	return g == nil || !g.Exists() || g.Contains(rec.SupervisorPID)
}

// drainCutNoted is the least cut of the drain's bound that stopSupervisor
// logs: a bound the prolog fitted to the same deadline (drain_timeout is
// the epilog's budget less the kill and removal) is cut by the
// milliseconds the epilog spent before it, which is no news.
const drainCutNoted = time.Second

// stopSupervisor signals the supervisor and waits for it: the record's
// drain bound, cut where the group's kill and removal would no longer fit
// before ctx's deadline (logged when the cut is drainCutNoted or more).
func stopSupervisor(ctx context.Context, rec *record.Record, g *cgroup.Group, jobID uint32, log logrus.FieldLogger) {
	pid := rec.SupervisorPID
	bound := time.Duration(max(rec.DrainTimeout, 1)) * time.Second
	start := time.Now()
	if deadline, ok := ctx.Deadline(); ok {
		if left := max(0, time.Until(deadline)-timing.GroupKillBound-timing.RemoveReserve); left < bound {
			if bound-left >= drainCutNoted {
				log.Warnf("job %d: the supervisor's drain gets %s of its %s: the epilog's deadline is in %s, and the kill and removal of its cgroup need %s", jobID,
					left.Round(time.Millisecond), bound, time.Until(deadline).Round(time.Millisecond), timing.GroupKillBound+timing.RemoveReserve)
			}
			bound = left
		}
	}
	ours := isOurs(rec, g)
	if ours {
		tellEpilogStart(rec, jobID, log)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for isOurs(rec, g) && time.Since(start) < bound {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if g.Exists() {
		log.Infof("job %d: supervisor (pid %d) stopped in %d ms", jobID, pid, time.Since(start).Milliseconds())
		return // the group's kill ends the rest
	}
	if !ours && rec.Cgroup != "" {
		// The prolog made the group, and it is gone with the supervisor:
		// a cgroup is removed only once no process is in it (systemd's
		// stop of Slurm's scope, which kills the scope's processes and
		// removes its subtree, or a reboot).
		log.Warnf("job %d: supervisor (pid %d) and the collector's cgroup %s were gone before the epilog (Slurm's scope stopped, or the node rebooted): nothing of the collector's is left in it", jobID, pid, rec.Cgroup)
		return
	}
	if !ours {
		// Gone before the epilog (or its pid reused): its session id may
		// name another session by now. Without a cgroup, nothing proves
		// which processes were the collector's.
		log.Warnf("job %d: supervisor (pid %d) was gone before the epilog and the node has no cgroup for the collector: processes it left outside its session cannot be found", jobID, pid)
		return
	}
	// No cgroup: the session the prolog created has id = the supervisor's
	// pid, and it was ours when the epilog began: a session id is not
	// reused while the session has members, so whatever is left with that
	// session id and the job's uid is the supervisor's.
	left := proc.KillSession(pid, rec.UID)
	if len(left) > 0 {
		log.Warnf("job %d: supervisor (pid %d) not done after %s: killed %d processes of its session", jobID, pid, bound, len(left))
	} else {
		log.Infof("job %d: supervisor (pid %d) stopped in %d ms", jobID, pid, time.Since(start).Milliseconds())
	}
}

// epilogStart is the epilog's start as the C front stamped it (Epilog; zero:
// not stamped). One epilog runs per process.
var epilogStart time.Time

// jobExit is the job's exit as slurmd put it in the epilog's environment
// (SLURM_JOB_EXIT_CODE, SLURM_JOB_DERIVED_EC; Epilog; nil: not there).
var jobExit *launch.JobExit

// tellEpilogStart tells the supervisor, on its control socket, when the epilog
// started (the C epilog's stamp, launch.EnvEpilogStart, else now), for
// its slurm.epilog span: the supervisor writes the span, root writes
// nothing of the user's. Bounded by launch.TellEpilogStart (half a
// second at most); a failure loses only the span (logged at debug level).
func tellEpilogStart(rec *record.Record, jobID uint32, log logrus.FieldLogger) {
	if rec.ControlSocket == "" {
		return
	}
	at := epilogStart
	if at.IsZero() || time.Since(at) < 0 || time.Since(at) > time.Hour {
		at = time.Now()
	}
	// The job's exit as slurmd put it in the epilog's environment, for the
	// span's attributes: inspect's outcome when sacct cannot answer.
	if err := launch.TellEpilogStart(rec.ControlSocket, at, jobExit); err != nil {
		log.Debugf("job %d: the epilog's start was not told to the supervisor (no slurm.epilog span): %v", jobID, err)
	}
}
