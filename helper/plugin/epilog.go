package plugin

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Epilog stops the job's supervisor on this node and removes the record dir.
// The supervisor is signalled only when /proc still shows the pid the prolog
// started (same uid and start time); it drains the collector on SIGTERM.
// Past the drain bound, its whole session is SIGKILLed. The returned error
// is for the log only: the epilog always returns 0 to Slurm.
func Epilog(a Args, node string, jobID uint32, log logrus.FieldLogger) error {
	dir := JobRecordDir(a.RecordDir, node, jobID)
	if err := checkRootDir(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	rec, rerr := ReadRecord(dir)
	if rerr == nil && rec.Status == "ready" && rec.SupervisorPID > 1 {
		stopSupervisor(rec, jobID, log)
	}
	if err := os.RemoveAll(dir); err != nil {
		return errors.Join(rerr, err)
	}
	if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return fmt.Errorf("job %d: record: %w", jobID, rerr)
	}
	return nil
}

func isOurs(rec *Record) bool {
	ps, err := readProc(rec.SupervisorPID)
	return err == nil && ps.State != 'Z' && ps.UID == rec.UID && ps.StartTime == rec.SupervisorStart
}

func stopSupervisor(rec *Record, jobID uint32, log logrus.FieldLogger) {
	pid := rec.SupervisorPID
	bound := time.Duration(max(rec.DrainTimeout, 1)) * time.Second
	start := time.Now()
	if isOurs(rec) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for isOurs(rec) && time.Since(start) < bound {
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The session the prolog created has id = the supervisor's pid; a pid
	// is not reused while its session has members, so whatever is left
	// with that session id and the job's uid is the supervisor's.
	left := sessionMembers(pid, rec.UID)
	for _, p := range left {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	if len(left) > 0 {
		log.Warnf("job %d: supervisor (pid %d) not done after %s: killed %d processes of its session", jobID, pid, bound, len(left))
	} else {
		log.Infof("job %d: supervisor (pid %d) stopped in %d ms", jobID, pid, time.Since(start).Milliseconds())
	}
}
