package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// monitor reports ready, then waits for a drain request, the job's end or
// the collector's death (restarted a bounded number of times).
func (s *supervisor) monitor(ctx context.Context, sigs <-chan os.Signal) error {
	ready := time.Since(s.started)
	s.log.Infof("collector ready in %d ms (%s): pid %d, OTLP gRPC %d, HTTP %d, health %d, output %s",
		ready.Milliseconds(), s.steps.String(), s.coll.pid, s.ports.OTLPGRPC, s.ports.OTLPHTTP, s.ports.Health, s.out)
	if fs := s.firstScrape; fs != nil {
		s.log.Infof("first scrapes placed at %s (host %s)", fs.At.UTC().Format("15:04:05.000"), fs.Host)
	}
	s.writeState(launch.StatusReady, "")
	s.sendReadiness(launch.Readiness{
		Status: launch.StatusReady, Ports: s.ports,
		SupervisorPID: os.Getpid(), CollectorPID: s.coll.pid, CollectorStart: s.coll.start,
		OutputDir: s.out, ReadyMillis: ready.Milliseconds(), Control: s.control != nil,
		Steps: s.steps.String(),
	})
	if s.opt.SlurmdAlive != nil {
		s.log.Infof("job %s: the epilog of this node's slurmd ends the collector; Slurm is asked only once that slurmd is gone or the job is past its end time", s.opt.Facts.JobID)
	}
	if s.opt.ResumeGC != nil {
		t := time.AfterFunc(StartGCPause, s.opt.ResumeGC)
		defer t.Stop() // the drain resumes it then
	}
	defer s.followSampled(ctx)()
	s.files = s.startFileDelivery()
	s.phasesStop = s.startPhases(ctx)
	s.nodeMetricsStop = s.startNodeMetrics(ctx)
	// The supervisor lives as long as the job: the pages of its binary
	// that only its start mapped go once the loops above have run their
	// first rounds, and once more when the first minute's one-off work is
	// done (as the collector does to itself).
	for _, after := range releaseStartPagesAt {
		t := time.AfterFunc(after, func() { proc.ReleaseStartPages() })
		defer t.Stop()
	}
	selfTick := time.NewTicker(time.Second)
	defer selfTick.Stop()
	recordTick := time.NewTicker(s.opt.RecordPoll)
	defer recordTick.Stop()
	slurmTick := time.NewTicker(s.opt.SlurmPoll)
	defer slurmTick.Stop()
	ownerTick := time.NewTicker(TargetOwnerPoll)
	defer ownerTick.Stop()
	s.checkTargetOwners(launch.StatusReady)
	askEvery, nextAsk := s.opt.SlurmPoll, time.Time{}
	for {
		exited := s.coll.Exited()
		if s.collGone {
			exited = nil // no collector after the final scrape: nothing to restart
		}
		select {
		case sig := <-sigs:
			s.log.Infof("%v: draining", sig)
			s.drainCause = "signal " + sig.String()
			return s.drain()
		case <-ctx.Done():
			s.drainCause = "stopped"
			return s.drain()
		case <-s.finalRequests():
			if n := s.control.nodes.Load(); n > 1 && s.opt.Facts.NodeIndex == 0 && !s.peersAsked {
				s.peersAsked = true
				go s.askPeers(int(n), time.Now())
			}
			s.finalScrape(ctx)
		case <-exited:
			if err := s.restart(ctx); err != nil {
				s.writeState(launch.StatusFailed, err.Error())
				s.writeReceipt()
				return err
			}
		case <-selfTick.C:
			s.pollSelf()
		case <-ownerTick.C:
			s.checkTargetOwners(launch.StatusReady)
		case <-recordTick.C:
			if s.opt.RecordPath == "" {
				continue
			}
			if _, err := os.Stat(s.opt.RecordPath); errors.Is(err, os.ErrNotExist) {
				s.log.Infof("job record %s is gone: the job has ended; draining", s.opt.RecordPath)
				s.drainCause = "record gone"
				return s.drain()
			}
		case <-slurmTick.C:
			if s.endWillCome() || time.Now().Before(nextAsk) {
				continue
			}
			running, err := s.opt.JobRunning(ctx, s.opt.Facts.JobID)
			nextAsk = time.Now().Add(askEvery - s.opt.SlurmPoll/2)
			askEvery = min(2*askEvery, MaxSlurmPoll)
			gone := s.opt.SlurmdAlive == nil || !s.opt.SlurmdAlive()
			if err == nil && running && gone && s.opt.NewSlurmd != nil && !s.opt.JobEnd.IsZero() {
				if f := s.opt.NewSlurmd(); f != nil && f() {
					s.log.Infof("job %s still runs: the epilog of the node's new slurmd ends the collector (Slurm is asked again after the job's end time)", s.opt.Facts.JobID)
					s.opt.SlurmdAlive, askEvery, nextAsk = f, s.opt.SlurmPoll, time.Time{}
				}
			}
			if err == nil && !running {
				s.log.Infof("Slurm no longer runs job %s; draining", s.opt.Facts.JobID)
				s.drainCause = "job ended (Slurm)"
				return s.drain()
			}
		}
	}
}

// endWillCome reports whether the node itself will end this supervisor:
// the slurmd that ran the prolog still runs (it runs the epilog) and the
// job's end time, when known, is not long past. Then Slurm is not asked.
func (s *supervisor) endWillCome() bool {
	if s.opt.SlurmdAlive == nil || !s.opt.SlurmdAlive() {
		return false
	}
	return s.opt.JobEnd.IsZero() || time.Now().Before(s.opt.JobEnd.Add(JobEndGrace))
}

// pollSelf reads the collector's counters: when spans last arrived (the
// drain waits for their span metrics) and the backend's refusals.
func (s *supervisor) pollSelf() {
	// The phase spans' count is read before and after the counters: an
	// export that ends between the two would otherwise read as spans
	// of the job's own (the counters without them, the count with).
	phaseSpans, busyBefore := s.phaseSpansSent()
	m, err := selfmetrics.Scrape(s.ports.Telemetry)
	if err != nil {
		return
	}
	phaseSpansAfter, busyAfter := s.phaseSpansSent()
	busy := busyBefore || busyAfter || phaseSpansAfter != phaseSpans
	if c := counts(m, "metrics"); c.Received > 0 && (s.lastRead == nil || counts(s.lastRead, "metrics").Received == 0) {
		// Once per collector run: from here on a receipt made from the
		// last read (the run killed) has figures.
		s.log.Infof("collector run %d: counters read, %d metric points received so far", s.runs+1, c.Received)
	}
	s.lastRead, s.lastReadAt = m, time.Now()
	if n := m.Sum(selfmetrics.ReceiverAccepted, "traces") - phaseSpans; n != s.lastSpans && !busy {
		s.lastSpans, s.spansAt = n, time.Now()
	}
	all := s.figures.Add(m)
	if !s.writeFailSeen {
		for _, sig := range s.signals() {
			if n := counts(all, sig).WriteFailed; n > 0 {
				// Once per supervisor: the drain says how many in all.
				s.writeFailSeen = true
				s.log.Warnf("the collector cannot write the job's files: %d %s not written to %s.jsonl so far: %s; the backend still gets them, the receipt will count them",
					n, selfmetrics.Words(sig), sig, writeTrouble(s.base(), s.out, "now"))
				break
			}
		}
	}
	if p := problems(all, s.signals(), "the file system refused the writes"); p != "" && p != s.problems {
		s.problems = p
		s.writeState(launch.StatusReady, "")
	}
}

// restart starts the collector again on the same ports, appending to the
// same files, up to MaxRestarts times.
func (s *supervisor) restart(ctx context.Context) error {
	tail := tailFile(s.logPath, 5)
	if s.restarts >= s.opt.MaxRestarts {
		s.endRun(nil, fmt.Sprintf("collector run %d exited unexpectedly (%v)", s.runs+1, s.coll.Err()))
		return fmt.Errorf("the collector died %d times; giving up. Last lines of %s:\n%s", s.restarts+1, s.logName(), tail)
	}
	s.endRun(nil, fmt.Sprintf("collector run %d exited unexpectedly (%v)", s.runs+1, s.coll.Err()))
	s.restarts++
	s.lastSpans = 0 // the new collector counts from zero
	s.log.Warnf("the collector exited unexpectedly (%v); restart %d of %d on the same ports", s.coll.Err(), s.restarts, s.opt.MaxRestarts)
	appendLog(s.logPath, fmt.Sprintf("gym-otel: the collector exited unexpectedly (%v); restart %d of %d", s.coll.Err(), s.restarts, s.opt.MaxRestarts))
	s.cutPartialLines()
	s.newRunBase()
	// The same held dir and configuration.
	failed, err := s.startRun(ctx, s.pol.HealthWait, nil)
	switch {
	case err == nil:
		s.writeState(launch.StatusReady, "")
		return nil
	case failed == startHealth && errors.Is(err, errExited):
		return s.restart(ctx)
	case failed == startProof:
		// The ports were free while the collector was down: another
		// user may hold one now and answer the health check. The tasks'
		// env names these ports, so new ones cannot help: give up (the
		// supervisor exits, and the steps that start from now on, seeing
		// it gone, set no env).
		s.endRun(nil, fmt.Sprintf("collector run %d was stopped: after restart %d %v", s.runs+1, s.restarts, err))
		return fmt.Errorf("after restart %d of the collector: %w; giving up (the job's later steps get no collector env on this node)", s.restarts, err)
	}
	return err
}

// squeueRunning asks Slurm (helper/slurm: squeue, timing.LivenessQueryBound) whether the
// job may still run: known and not in a final state. No answer is an
// error, which changes nothing.
func squeueRunning(ctx context.Context, jobID string) (bool, error) {
	id, err := slurm.ParseJobID(jobID)
	if err != nil {
		return true, err
	}
	ctx, cancel := context.WithTimeout(ctx, timing.LivenessQueryBound)
	defer cancel()
	j, known, err := slurm.Query(ctx, id)
	if err != nil {
		return true, err
	}
	return known && !slurm.Final(j.State), nil
}
