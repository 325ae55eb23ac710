package supervise

import (
	"context"
	"fmt"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
)

// The final scrape at the batch script's end (issue 29).
//
// The job's services die with the batch step, and the batch step holds
// the job after the script's last line until every target of the job
// has a sample taken after that line (spank/hold.c). The request reaches
// the batch node's supervisor on its control socket and every other node's
// from the batch node's supervisor (peers.go). Waiting for each
// target's next scrape costs up to one interval. Instead, the batch step
// tells its node's supervisor on the control socket that the script has
// ended (contract.ControlFinal, root only) and the supervisor makes the
// collector scrape every target now: the first collector run's
// configuration sets the Prometheus receiver's scrape_on_shutdown, so
// stopping it scrapes each target once more (Prometheus' scrape loops
// scrape as they stop, collector v0.161.0), flushes the pipelines into the
// files and drains the backend queue, and sends its final figures
// (finalSink). The supervisor then starts the next run on the same ports
// without scrape_on_shutdown: the job's later steps' ends and the job's
// own phase spans, and whatever the services still send over OTLP, still
// have a collector until the epilog's drain. The control socket's "sampled"
// answer follows metrics.jsonl, so the hold ends once the final samples
// are in the file.
//
// The final scrape is done once per job. The span metrics of the spans
// the stopped run's connector had not exported yet are appended at the
// drain, which counts every span of traces.jsonl (spancount.go). Only when
// the job's files are too large for that (SpanCountMaxBytes) and a span
// arrived within the span metrics' settle time (pol.SpanMetricsSettle) is
// there no final scrape (stopping the collector then would lose the
// span metrics of the last spans): the hold waits for the next scrape of
// every target, as without a final scrape.

// finalRequests is the hold server's channel of final-scrape requests
// (nil without a hold server, which never delivers).
func (s *supervisor) finalRequests() <-chan struct{} {
	if s.control == nil {
		return nil
	}
	return s.control.finals
}

// finalScrape stops the running collector (which scrapes every target as
// it stops), accounts for its run, and starts the next run without
// scrape_on_shutdown. A next run that cannot start leaves the supervisor
// without a collector until the drain (collGone), said in its log.
func (s *supervisor) finalScrape(ctx context.Context) {
	if s.finalDone || s.collGone || !s.scrapeOnShutdown {
		return
	}
	s.finalDone = true
	s.pollSelf()
	if !s.spansAt.IsZero() && time.Since(s.spansAt) < s.pol.SpanMetricsSettle && s.fileBytes("traces")+s.fileBytes("metrics") > s.opt.SpanCountMaxBytes {
		s.log.Infof("the batch script has ended: no early final scrape (spans arrived %v ago; their span metrics need %v, the files being too large to count at the drain); the hold waits for every target's next scrape",
			time.Since(s.spansAt).Round(time.Millisecond), s.pol.SpanMetricsSettle)
		return
	}
	if !s.coll.Running() {
		return // the monitor's restart comes first
	}
	// The node's readings have no target to scrape: one more is pushed
	// now, so that the job's groups are in the files at the script's end.
	s.pushNodeMetrics(ctx)
	start := time.Now()
	clean, _, exit := s.stopRun(stopAtFinalScrape)
	stopped := exit.Sub(start)
	if !clean {
		s.cutPartialLines()
	}
	s.log.Infof("the batch script has ended: final scrape of every target done, collector run %d stopped in %d ms (clean: %v)", s.runs, stopped.Milliseconds(), clean)
	appendLog(s.logPath, fmt.Sprintf("gym-otel: final scrape at the batch script's end: collector run %d stopped (clean: %v); the next run scrapes no more at its stop", s.runs, clean))
	s.lastSpans = 0 // the next run counts from zero
	s.scrapeOnShutdown = false
	if err := s.startNext(ctx); err != nil {
		s.collGone = true
		s.log.Warnf("after the final scrape, no collector until the job's end: %v", err)
		appendLog(s.logPath, "gym-otel: after the final scrape, no collector until the job's end: "+err.Error())
		s.writeState(launch.StatusReady, "")
		return
	}
	s.log.Infof("collector run %d started after the final scrape in %d ms: pid %d", s.runs+1, time.Since(start).Milliseconds()-stopped.Milliseconds(), s.coll.pid)
	s.writeState(launch.StatusReady, "")
}

// startNext writes the configuration again (scrape_on_shutdown as now set)
// and starts the next collector run on the same ports, proving them as
// at every start.
func (s *supervisor) startNext(ctx context.Context) error {
	if err := s.writeConfig(); err != nil {
		return err
	}
	s.newRunBase()
	_, err := s.startRun(ctx, s.pol.HealthWait, nil)
	return err
}
