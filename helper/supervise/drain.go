package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// cutPartialLines truncates each jsonl file back to its last complete line.
// A collector killed mid-write leaves half a batch at the end; the restarted
// one appends, and the half line would glue onto its first line, making a
// line that does not parse. The half batch is lost either way.
func (s *supervisor) cutPartialLines() {
	for _, sig := range []string{"metrics", "traces", "logs"} {
		path, name := s.path(jobdir.SignalFile(sig)), filepath.Join(s.out, jobdir.SignalFile(sig))
		size, keep, err := completeLength(path)
		if err != nil || keep == size {
			continue
		}
		if err := os.Truncate(path, keep); err != nil {
			s.log.Warnf("%s: cutting the partial last line: %v", name, unwrapPath(err))
			continue
		}
		appendLog(s.logPath, fmt.Sprintf("gym-otel: removed a partial last line (%d bytes) from %s left by the collector's exit", size-keep, name))
	}
}

// completeLength returns the size of path and the length of its complete
// lines (up to and including the last newline), reading backwards from the
// end in 64 KiB chunks (the files can be large).
func completeLength(path string) (size, keep int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size = fi.Size()
	buf := make([]byte, 64*1024)
	for end := size; end > 0; {
		n := min(int64(len(buf)), end)
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return size, size, err
		}
		if i := strings.LastIndexByte(string(buf[:n]), '\n'); i >= 0 {
			return size, end - n + int64(i) + 1, nil
		}
		end -= n
	}
	return size, 0, nil
}

// drain reads the backend counters, stops the collector within
// shutdown_timeout_seconds, appends what ends after it (the drain's spans,
// the span metrics the connector did not export: spancount.go) and reports
// what the backend refused.
func (s *supervisor) drain() error {
	drainStart := time.Now()
	if s.opt.ResumeGC != nil {
		// A job that ends within StartGCPause: the drain reads the
		// files with the garbage collector on.
		s.opt.ResumeGC()
	}
	s.writeState(jobdir.StatusDraining, "")
	s.endPhases()
	s.endNodeMetrics()
	s.pollSelf()
	// The span metrics of the last spans are counted from the files
	// after the collector's exit, unless the files are too large to read
	// within the drain: then the connector's flushes are waited for.
	countAll := true
	if size := s.fileBytes("traces") + s.fileBytes("metrics"); size > s.opt.SpanCountMaxBytes {
		countAll = false
		// The last spans the collector took: the job's (the receiver's
		// counter, as pollSelf last saw it change) and the supervisor's
		// own phase spans, the node's root span among them, sent just
		// now.
		last := s.spansAt
		if p := s.phasesSentAt(); p.After(last) {
			last = p
		}
		// A new series is flushed as 0 first and with its count one
		// interval later: wait two intervals after the last spans.
		if wait := time.Until(last.Add(s.pol.SpanMetricsSettle)); !last.IsZero() && wait > 0 {
			s.log.Infof("traces.jsonl and metrics.jsonl hold %.1f MiB (more than the %.1f MiB read at the drain): waiting %v for the span metrics of the last spans",
				float64(size)/(1<<20), float64(s.opt.SpanCountMaxBytes)/(1<<20), wait.Round(time.Millisecond))
			time.Sleep(wait)
		}
		s.pollSelf()
	}
	// The last run ended at the final scrape (collGone) and is counted.
	clean, wasRunning, collectorExit := true, s.coll.Running(), time.Now()
	if !s.collGone {
		clean, wasRunning, collectorExit = s.stopRun(stopAtDrain)
	}
	s.trouble = ""
	for _, sig := range s.signals() {
		if counts(s.figures, sig).WriteFailed > 0 {
			s.trouble = writeTrouble(s.base(), s.out, "at the drain")
			break
		}
	}
	// The collector has exited: the reserve's room is for the receipt,
	// state.json and the last log lines.
	s.release()
	if s.trouble != "" {
		// A write that failed half-way leaves part of a line.
		s.cutPartialLines()
	}
	s.problems = problems(s.figures, s.signals(), s.trouble)
	if !clean {
		s.cutPartialLines() // before the drain's line: a killed collector's half line
	}
	// The delivery of the appended lines takes at most DeliveryBound out
	// of the SupervisorSlack of the epilog's wait (DrainWait), and less
	// when the count of the spans (or the settle) and the stop took more
	// than theirs.
	bound := min(timing.DeliveryBound, time.Until(drainStart.Add(s.pol.DrainWait-timing.SupervisorSlack+timing.DeliveryBound)))
	s.appendAfterCollector(drainEnd{start: drainStart, exit: collectorExit, cause: s.drainCause, exitKnown: wasRunning,
		killed: s.coll.killed, clean: clean}, bound, countAll)
	// With otel.delivery: files, the rest of the epilog's wait, less what
	// the receipt and the state need (SupervisorSlack - DeliveryBound), is
	// the files' delivery's.
	s.finishFileDelivery(time.Until(drainStart.Add(s.pol.DrainWait - timing.SupervisorSlack + timing.DeliveryBound)))
	s.writeReceipt()
	if p := s.problems; p != "" {
		appendLog(s.logPath, "gym-otel: "+p)
		s.log.Warn(p)
	} else if logShowsLoss(s.unknown, s.logPath) {
		s.problems = "the backend refused or dropped data (see collector.log); the local jsonl files are complete"
		appendLog(s.logPath, "gym-otel: "+s.problems)
	}
	if !clean && s.trouble == "" {
		s.cutPartialLines()
	}
	if !clean {
		var err error
		switch {
		case !wasRunning:
			err = fmt.Errorf("the collector had exited (%v) before the drain", s.coll.Err())
		case s.coll.killed:
			err = fmt.Errorf("the collector did not shut down within otel.shutdown_timeout_seconds (%ds) and was killed", s.o.ShutdownTimeoutSeconds)
		default:
			// In time, but its shutdown failed: a file exporter that
			// could not flush its last writes (a full file system),
			// counted in the receipt.
			err = fmt.Errorf("the collector's shutdown ended with an error (%v); see collector.log", s.coll.Err())
		}
		s.writeState(jobdir.StatusDrained, err.Error())
		return err
	}
	s.writeState(jobdir.StatusDrained, "")
	return nil
}

// logShowsLoss says whether the collector's log at logPath shows data the
// backend did not get that the figures cannot: only when some run's
// figures are unknown (unknown, one sentence each, is not empty). Final
// figures count every request lost after its retries or at shutdown (the
// exporter's send_failed is counted outside its retries), and a retry that
// then succeeded is no loss.
func logShowsLoss(unknown []string, logPath string) bool {
	return len(unknown) > 0 && strings.Contains(tailFile(logPath, 200), render.BackendExporter) && logHasExportFailure(logPath)
}

// logHasExportFailure says whether the collector's log at path has a
// line of the backend exporter's giving up on a request: the exporter
// helper's "Exporting failed. Dropping data." (its queue's consumer, after
// the retries or at shutdown) or "Exporting failed. Rejecting data."
// (without a queue). Its "Exporting failed. Will retry the request after
// interval." is not one: the request is sent again, and may arrive. False
// when the log cannot be read.
func logHasExportFailure(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, render.BackendExporter) &&
			(strings.Contains(line, "Exporting failed. Dropping data") || strings.Contains(line, "Exporting failed. Rejecting data")) {
			return true
		}
	}
	return false
}
