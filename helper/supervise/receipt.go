package supervise

import (
	"fmt"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
)

// signals are the pipelines of the rendered configuration.
func (s *supervisor) signals() []string {
	if s.o.GymLogs {
		return []string{"traces", "metrics", "logs"}
	}
	return []string{"traces", "metrics"}
}

// endRun adds the figures of the collector run that just ended: final (its
// export at shutdown) when there is one; else its last read counters, which
// miss what it did after that read, said in why.
func (s *supervisor) endRun(final selfmetrics.Counters, why string) {
	s.runs++
	if final != nil {
		s.figures = s.figures.Add(final)
		s.lastRead = nil
		return
	}
	// A killed file exporter also loses what it had counted as written but
	// not yet flushed (flush_interval): its count can exceed the file's.
	if s.lastRead == nil {
		s.unknown = append(s.unknown, why+": none of its figures were read")
	} else {
		s.figures = s.figures.Add(s.lastRead)
		s.unknown = append(s.unknown, fmt.Sprintf("%s: what it did after its last read at %s is not counted, and its last second of writes, counted as written, may be missing from the files",
			why, s.lastReadAt.UTC().Format(time.RFC3339)))
	}
	s.lastRead = nil
}

// logFinalGain logs how much the final figures exceed the last periodic
// read: what a receipt made from that read would have missed.
func (s *supervisor) logFinalGain(final selfmetrics.Counters) {
	if s.lastRead == nil {
		return
	}
	var parts []string
	for _, sig := range s.signals() {
		f, l := counts(final, sig), counts(s.lastRead, sig)
		parts = append(parts, fmt.Sprintf("%s written +%d sent +%d failed +%d", sig, f.Written-l.Written, f.Sent-l.Sent, f.Lost()-l.Lost()))
	}
	{
		s.log.Infof("final figures beyond the last periodic read (%v before the collector had exited): %s", time.Since(s.lastReadAt).Round(time.Millisecond), strings.Join(parts, "; "))
	}
}

// writeReceipt writes <output dir>/receipt.json from the ended runs and
// logs its summary.
func (s *supervisor) writeReceipt() { s.saveReceipt(true) }

// saveReceipt writes <output dir>/receipt.json from the ended runs; logIt:
// its summary to the log.
func (s *supervisor) saveReceipt(logIt bool) {
	r := &receipt.Receipt{
		JobID: s.opt.Facts.JobID, Node: s.opt.Facts.Node, RestartCount: s.opt.Facts.RestartCount,
		Basis: receipt.BasisFinal, Collectors: s.runs, Unknown: s.unknown, Signals: map[string]receipt.Counts{},
		WriteTrouble: s.trouble, Appended: s.appended, Delivery: s.files.receipt(),
		RemoteExportOff: !s.o.RemoteExport(),
	}
	switch {
	case s.figures == nil && len(s.unknown) > 0:
		r.Basis = receipt.BasisNone
	case len(s.unknown) > 0:
		r.Basis = receipt.BasisLastRead
	}
	for _, sig := range s.signals() {
		c := counts(s.figures, sig)
		r.Signals[sig] = c
		// The file exporter and the backend exporter get the same items,
		// but what the file's pipeline alone filters (local_node_metrics).
		if r.Basis == receipt.BasisFinal && r.Delivery == nil && !r.RemoteExportOff && c.Written+c.WriteFailed+c.FileFiltered != c.Sent+c.Lost() {
			r.Unknown = append(r.Unknown, fmt.Sprintf("%s: the file exporter got %d items (and its pipeline filtered %d) and the backend exporter %d; what became of the difference is not counted",
				sig, c.Written+c.WriteFailed, c.FileFiltered, c.Sent+c.Lost()))
		}
	}
	if s.base() == "" {
		return // the output dir is not held: nothing is written there
	}
	if err := r.Write(s.base()); err != nil {
		s.log.Warnf("%v (the output dir %s, held as %s)", err, s.out, s.base())
		return
	}
	if logIt {
		s.log.Infof("receipt: %s", strings.Join(r.Summary(), " |"))
	}
}
