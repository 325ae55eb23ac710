package callbacks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// MaxSweepQueries bounds the questions to slurmctld of one prolog's sweep:
// stale records beyond it are left for the next job's prolog on the node.
const MaxSweepQueries = 2

// SweepStale removes the records of other jobs on this node whose job is
// over but whose epilog never ran: a node that died mid-job and came back
// with /run intact (Slurm 24.11 runs no epilog for such a job there). Only
// records whose supervisor is gone are considered (a live supervisor ends
// itself when its job is no longer running). A record written before the
// node's last boot is over without asking (a reboot ended every process of
// that job here); any other one only when slurmctld says the job is over
// (squeue: no longer known, or in a final state), at most MaxSweepQueries
// questions per call. Then it ends orphaned cgroups (sweepOrphanGroups).
// Called by the prolog; best effort, logged, and done when ctx is: what it
// did not reach is left for a later prolog or epilog. Last, it removes the
// start locks of jobs that have no record dir (sweepStartLocks).
func SweepStale(ctx context.Context, recordDir, cluster, node string, current uint32, log logrus.FieldLogger) {
	defer sweepStartLocks(recordDir, node, current, log)
	sweepStaleRecords(ctx, recordDir, cluster, node, current, log)
	sweepOrphanGroups(ctx, recordDir, cluster, node, current, log)
	sweepOrphanRules(ctx, recordDir, cluster, node, current, log)
}

// sweepOrphanRules removes this cluster's packet-filter rules on the node
// of jobs that have no record dir on the node (portfilter.Orphans): left
// by an epilog whose removal failed, or by a record dir removed by hand.
// The prolog makes a job's record dir before its rules and the epilog
// removes the rules before the dir, so a job that has rules and no dir is
// over. The chains are named by cluster and node: another cluster's, whose
// node of the same name runs on this host (test clusters; job ids are per
// cluster), are never touched. Chains named the legacy way (no cluster in
// the name: a prolog before the upgrade) cannot tell their cluster: they
// are removed only when some port of theirs is not listened on (a live
// job's collector, of whichever cluster, holds every port of its rules).
// Best effort, logged.
func sweepOrphanRules(ctx context.Context, recordDir, cluster, node string, current uint32, log logrus.FieldLogger) {
	nft := portfilter.Nft()
	if nft == "" || ctx.Err() != nil {
		return
	}
	has := func(id uint32) bool {
		if id == current {
			return true
		}
		_, err := os.Lstat(filepath.Join(recordDir, node, strconv.FormatUint(uint64(id), 10)))
		return !errors.Is(err, fs.ErrNotExist)
	}
	orphans, err := portfilter.Orphans(ctx, nft, cluster, node, has)
	if err != nil {
		log.Debugf("the packet filter's orphaned rules: %v", err)
		return
	}
	listen, _ := launch.NodeListeners()
	for _, j := range orphans {
		kind := ""
		if j.Legacy {
			kind = " (named before the cluster was in the names)"
			held := len(j.Ports) > 0
			for _, p := range j.Ports {
				held = held && len(listen[p]) > 0
			}
			if held {
				log.Debugf("job %d: its packet filter rules%s have no record on %s but every port of theirs is listened on: left", j.ID, kind, node)
				continue
			}
		}
		if err := removeRules(ctx, j); err != nil {
			log.Warnf("job %d: removing its orphaned packet filter rules%s (ports %v; the job has no record on %s): %v", j.ID, kind, j.Ports, node, err)
			continue
		}
		log.Infof("job %d: removed its orphaned packet filter rules%s (ports %v; the job has no record on %s)", j.ID, kind, j.Ports, node)
	}
}

func sweepStaleRecords(ctx context.Context, recordDir, cluster, node string, current uint32, log logrus.FieldLogger) {
	base, ents := nodeRecordEntries(recordDir, node)
	if len(ents) == 0 {
		return
	}
	boot := proc.BootTime()
	queries := 0
	for _, e := range ents {
		id, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || uint32(id) == current || !e.IsDir() {
			continue
		}
		dir := filepath.Join(base, e.Name())
		if record.CheckRootDir(dir) != nil {
			continue
		}
		group := openJobGroup(cluster, node, uint32(id))
		if rec, err := record.Read(dir); err == nil && rec.SupervisorPID > 1 && isOurs(rec, group) {
			continue
		}
		if ctx.Err() != nil {
			log.Warnf("job %d: stale records not all checked: the prolog's deadline is near", current)
			return
		}
		if !beforeBoot(dir, boot) {
			if queries >= MaxSweepQueries {
				log.Infof("job %d: the stale record of job %d is left for a later prolog (%d questions to slurmctld per prolog)", current, id, MaxSweepQueries)
				continue
			}
			queries++
			qctx, done := context.WithTimeout(ctx, timing.QueryBound)
			j, known, err := slurm.Query(qctx, uint32(id))
			done()
			if err != nil || (known && !slurm.Final(j.State)) {
				continue // no answer, or the job may still run: keep its record
			}
		}
		if err := endJobGroup(ctx, group, uint32(id), log); err != nil {
			// Left, it is an orphaned group once the record is gone.
			log.Warnf("job %d: the stale cgroup of job %d: %v", current, id, err)
		}
		if rec, err := record.Read(dir); err == nil {
			releasePorts(ctx, rec, node, uint32(id), log)
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warnf("job %d: removing the stale record of job %d: %v", current, id, err)
			continue
		}
		log.Infof("job %d: removed the stale record of job %d (the job is over and its epilog never ran here)", current, id)
	}
}

// sweepOrphanGroups ends the collector cgroups on this node of jobs that
// have no record dir (and are not the current job): the record dir is made
// before a job's group and removed after it, so such a group is left from a
// job whose epilog did not finish (or ran out of time). Each group's end
// takes what is left of ctx's deadline (endJobGroup); once ctx is done the
// groups not reached are left for a later prolog or epilog, counted in one
// logged line.
func sweepOrphanGroups(ctx context.Context, recordDir, cluster, node string, current uint32, log logrus.FieldLogger) {
	hs := nodeHierarchies(node)
	seen := map[uint32]bool{}
	var left []uint32
	nodePath, err := cgroup.NodePath(cluster, node)
	if err != nil {
		return
	}
	for _, h := range hs {
		ents, err := os.ReadDir(filepath.Join(h.GroupRoot(), nodePath))
		if err != nil {
			continue
		}
		for _, e := range ents {
			id, ok := cgroup.GroupJobID(e.Name())
			if !ok || !e.IsDir() || id == current || seen[id] {
				continue
			}
			seen[id] = true
			if _, err := os.Lstat(record.JobDir(recordDir, node, id)); !errors.Is(err, os.ErrNotExist) {
				continue
			}
			if ctx.Err() != nil {
				left = append(left, id)
				continue
			}
			if err := endJobGroup(ctx, openJobGroup(cluster, node, id), id, log); err != nil {
				log.Warnf("job %d: the orphan cgroup of job %d: %v", current, id, err)
				continue
			}
			log.Infof("job %d: removed the cgroup of job %d, which had no record on this node", current, id)
		}
	}
	if len(left) > 0 {
		const show = 10
		ids := fmt.Sprint(left[:min(len(left), show)])
		if len(left) > show {
			ids = strings.TrimSuffix(ids, "]") + " ...]"
		}
		log.Warnf("job %d: %d orphaned cgroups (jobs %s) left for a later prolog or epilog on this node: the deadline is near", current, len(left), ids)
	}
}

// nodeRecordEntries is the node's record dir, <recordDir>/<node>, and its
// entries: none when the dir is not root's (record.CheckRootDir) or
// cannot be read.
func nodeRecordEntries(recordDir, node string) (string, []os.DirEntry) {
	base := filepath.Join(recordDir, node)
	if record.CheckRootDir(base) != nil {
		return base, nil
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return base, nil
	}
	return base, ents
}

// sweepStartLocks removes the start locks (collector_wait=step,
// spank/handoff.c) in the node's record dir of jobs other than current
// that have no record dir and whose lock no start holds: the epilog
// removes a job's lock after its own, so such a lock is left by an
// epilog that did not run, or by a start that ended before it made the
// record dir. A lock still held (a start under way) and a file that is
// not root's regular file are left. Best effort, logged at debug.
func sweepStartLocks(recordDir, node string, current uint32, log logrus.FieldLogger) {
	base, ents := nodeRecordEntries(recordDir, node)
	for _, e := range ents {
		id, ok := startLockJob(e.Name())
		if !ok || id == current || !e.Type().IsRegular() {
			continue
		}
		if _, err := os.Lstat(record.JobDir(recordDir, node, id)); !errors.Is(err, fs.ErrNotExist) {
			continue // the job's epilog removes it
		}
		path := filepath.Join(base, e.Name())
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if err := os.Remove(path); err == nil {
				log.Debugf("job %d: removed the start lock of job %d (no record dir on %s)", current, id, node)
			}
		}
		f.Close()
	}
}

// startLockJob is the job id of a start lock's file name
// (contract.StartLockPrefix, the id, contract.StartLockSuffix).
func startLockJob(name string) (uint32, bool) {
	rest, ok := strings.CutPrefix(name, contract.StartLockPrefix)
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, contract.StartLockSuffix)
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(digits, 10, 32)
	return uint32(id), err == nil
}

// beforeBoot reports whether the record in dir was last written before
// boot (the record file's mtime; a minute's margin for clock steps at boot).
func beforeBoot(dir string, boot time.Time) bool {
	if boot.IsZero() {
		return false
	}
	fi, err := os.Stat(filepath.Join(dir, contract.RecordFile))
	return err == nil && fi.ModTime().Before(boot.Add(-time.Minute))
}
