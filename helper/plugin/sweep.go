package plugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// SweepStale removes the records of other jobs on this node whose job is
// over but whose epilog never ran: a node that died mid-job and came back
// with /run intact (Slurm 24.11 runs no epilog for such a job there). Only
// records whose supervisor is gone are considered (a live supervisor ends
// itself when its job is no longer running), and only when slurmctld says
// the job is over (squeue: no longer known, or in a final state). Called by
// the prolog; best effort, logged, and done when ctx is.
func SweepStale(ctx context.Context, recordDir, cluster, node string, current uint32, log logrus.FieldLogger) {
	defer sweepOrphanGroups(recordDir, cluster, node, current, log)
	base := filepath.Join(recordDir, node)
	if record.CheckRootDir(base) != nil {
		return
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
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
		qctx, done := context.WithTimeout(ctx, QueryBound)
		j, known, err := slurm.Query(qctx, uint32(id))
		done()
		if err != nil || (known && !slurm.Final(j.State)) {
			continue // no answer, or the job may still run: keep its record
		}
		if err := endJobGroup(group, uint32(id), log); err != nil {
			log.Warnf("job %d: the stale cgroup of job %d: %v", current, id, err)
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
// job whose epilog did not finish.
func sweepOrphanGroups(recordDir, cluster, node string, current uint32, log logrus.FieldLogger) {
	hs, err := cgroup.Discover(mountinfo)
	if err != nil {
		return
	}
	seen := map[uint32]bool{}
	for _, h := range hs {
		ents, err := os.ReadDir(filepath.Join(h.Mount, groupBase(cluster), node))
		if err != nil {
			continue
		}
		for _, e := range ents {
			n, ok := strings.CutPrefix(e.Name(), "job_")
			id, err := strconv.ParseUint(n, 10, 32)
			if !ok || err != nil || !e.IsDir() || uint32(id) == current || seen[uint32(id)] {
				continue
			}
			seen[uint32(id)] = true
			if _, err := os.Lstat(record.JobDir(recordDir, node, uint32(id))); !errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err := endJobGroup(openJobGroup(cluster, node, uint32(id)), uint32(id), log); err != nil {
				log.Warnf("job %d: the orphan cgroup of job %d: %v", current, id, err)
				continue
			}
			log.Infof("job %d: removed the cgroup of job %d, which had no record on this node", current, id)
		}
	}
}
