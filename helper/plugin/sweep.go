package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
)

// activeStates are the Slurm job states (scontrol's JobState=) in which a
// job may still own a record on a node: the epilog has yet to run.
var activeStates = map[string]bool{
	"PENDING": true, "CONFIGURING": true, "RUNNING": true, "SUSPENDED": true,
	"COMPLETING": true, "RESIZING": true, "REQUEUED": true, "REQUEUE_HOLD": true,
	"REQUEUE_FED": true, "SIGNALING": true, "STAGE_OUT": true, "STOPPED": true,
}

var jobStateRE = regexp.MustCompile(`(?:^|\s)JobState=(\S+)`)

// JobGone tells from `scontrol -o show job <id>` (its output and error)
// whether job jobID is over for good: slurmctld no longer knows it
// ("Invalid job id specified"), or its line (JobId=<id>; an array's job id
// lists every task) shows a final JobState. Any other failure (the
// controller unreachable) is not an answer: known is false.
func JobGone(out string, runErr error, jobID uint32) (gone, known bool) {
	if strings.Contains(out, "Invalid job id") {
		return true, true
	}
	if runErr != nil {
		return false, false
	}
	prefix := "JobId=" + strconv.FormatUint(uint64(jobID), 10) + " "
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if m := jobStateRE.FindStringSubmatch(line); m != nil {
			return !activeStates[m[1]], true
		}
	}
	return false, false
}

// SweepStale removes the records of other jobs on this node whose job is
// over but whose epilog never ran: a node that died mid-job and came back
// with /run intact (Slurm 24.11 runs no epilog for such a job there). Only
// records whose supervisor is gone are considered (a live supervisor ends
// itself when its job is no longer running), and only when slurmctld says
// the job is over. Called by the prolog; best effort, logged.
func SweepStale(recordDir, node string, current uint32, log logrus.FieldLogger) {
	defer sweepOrphanGroups(recordDir, node, current, log)
	base := filepath.Join(recordDir, node)
	if checkRootDir(base) != nil {
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
		if checkRootDir(dir) != nil {
			continue
		}
		group := openJobGroup(node, uint32(id))
		if rec, err := ReadRecord(dir); err == nil && rec.SupervisorPID > 1 && isOurs(rec, group) {
			continue
		}
		out, runErr := scontrolShowJob(uint32(id))
		if gone, known := JobGone(out, runErr, uint32(id)); !gone || !known {
			continue
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
func sweepOrphanGroups(recordDir, node string, current uint32, log logrus.FieldLogger) {
	hs, err := cgroup.Discover(mountinfo)
	if err != nil {
		return
	}
	seen := map[uint32]bool{}
	for _, h := range hs {
		ents, err := os.ReadDir(filepath.Join(h.Mount, CgroupBase, node))
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
			if _, err := os.Lstat(JobRecordDir(recordDir, node, uint32(id))); !errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err := endJobGroup(openJobGroup(node, uint32(id)), uint32(id), log); err != nil {
				log.Warnf("job %d: the orphan cgroup of job %d: %v", current, id, err)
				continue
			}
			log.Infof("job %d: removed the cgroup of job %d, which had no record on this node", current, id)
		}
	}
}

// scontrolShowJob runs `scontrol -o show job <id>` (10 s bound) and returns
// its standard output, followed by its standard error when it failed.
func scontrolShowJob(jobID uint32) (string, error) {
	bin := ""
	for _, p := range scontrolPaths {
		if _, err := os.Stat(p); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("scontrol"); err != nil {
			return "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-o", "show", "job", strconv.FormatUint(uint64(jobID), 10)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			out = append(out, ee.Stderr...)
		}
		return string(out), fmt.Errorf("scontrol show job: %w", err)
	}
	return string(out), nil
}
