// Package receipt is otel/receipt.json: what one node's collector received,
// refused, wrote to the job's jsonl files and sent to (or failed to send to)
// the site's backend, per signal, from the collector's own telemetry. The
// supervisor writes it at the drain, after the collector has exited (the
// job's output is closed by then, so it goes beside the files);
// `gym-otel-spank inspect` shows it first.
//
// A receipt never presents a guess as a count: Basis says whether the
// figures are the collector's final counters (BasisFinal) or only what was
// read before the collector ended without a final read (BasisLastRead:
// lower bounds), and Unknown says what is not known and why.
package receipt

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
)

// FileName is the receipt's name in a node's output dir.
const FileName = "receipt.json"

// Version is the receipt format written by Write; Read refuses others.
const Version = 1

// Basis values: where a receipt's figures come from.
const (
	// BasisFinal: every collector process of the run was read after its
	// pipelines had shut down (everything flushed): the figures are exact.
	BasisFinal = "final"
	// BasisLastRead: at least one collector process ended (killed, or
	// crashed and restarted) before a final read; its figures are those of
	// the last read before its end, so every figure is a lower bound of
	// what the collectors counted. (A killed file exporter loses what it
	// had counted but not yet flushed: its file can hold less.)
	BasisLastRead = "last_read"
	// BasisNone: the collector's own telemetry was never read (turned off,
	// or the collector never answered): every figure is unknown (0).
	BasisNone = "none"
)

// AppendedPoints is the number of metric points the supervisor appended
// to metrics.jsonl after the collector's exit (the span metrics of the
// spans it appended and of those the span metrics connector had not
// exported). The collector's figures (Signals) do not count
// them: metrics.jsonl holds Signals["metrics"].Written + AppendedPoints()
// points.
func (r *Receipt) AppendedPoints() int64 {
	var n int64
	for _, a := range r.Appended {
		if a.File == "metrics.jsonl" {
			n += int64(a.Points)
		}
	}
	return n
}

// AppendedSpans is the number of spans the supervisor appended to
// traces.jsonl after the collector's exit (Appended: the drain's and the
// epilog's phase spans, and any the collector did not accept at the drain).
// The collector's figures (Signals) do not count them: traces.jsonl holds
// Signals["traces"].Written + AppendedSpans() spans.
func (r *Receipt) AppendedSpans() int64 {
	var n int64
	for _, a := range r.Appended {
		if a.File == "traces.jsonl" {
			n += int64(a.Spans)
		}
	}
	return n
}

// Signals are the keys of Receipt.Signals, in report order.
var Signals = []string{"traces", "metrics", "logs"}

// Counts are one signal's items (spans, metric data points or log records)
// through one node's collector, summed over the collector processes of the
// run (a restarted collector starts its counters at zero).
type Counts struct {
	// Received is otelcol_receiver_accepted_* summed over the receivers
	// (the job's OTLP and Prometheus scrapes, and the plugin's own:
	// otlp/plugin's phase spans, otlp/plugin's readings of the node): items
	// that entered a pipeline. The job's pipeline and the plugin's of a
	// signal share its file and backend exporters, so Written and Sent
	// count both. The
	// span_metrics connector's points are not received by a receiver, so
	// for metrics Written can exceed Received.
	Received int64 `json:"received"`
	// Refused is otelcol_receiver_refused_* plus otelcol_receiver_failed_*
	// summed over the receivers: items a receiver turned away (e.g. the
	// memory limiter refused them) or failed to process.
	Refused int64 `json:"refused"`
	// Written is otelcol_exporter_sent_* of the file exporter
	// (file/<signal>): items written to <signal>.jsonl. Filters between
	// receiver and exporter (staleness markers, other jobs' GPUs) make it
	// smaller than Received by design.
	Written int64 `json:"written"`
	// WriteFailed is otelcol_exporter_send_failed_* plus
	// otelcol_exporter_enqueue_failed_* of the file exporter: items the
	// file system refused (full, or the user's quota reached). They are
	// in no file; the backend exporter got them all the same (its own
	// counts say whether the backend did; with delivery from the files
	// there is no backend exporter and the backend does not get them
	// either), and the producer was not refused: the file exporter is fed after the receivers have answered.
	WriteFailed int64 `json:"write_failed"`
	// FileFiltered is otelcol_processor_filter_datapoints_filtered of the
	// filter of the file's pipeline alone (filter/node_local: the
	// node_exporter series outside local_node_metrics): items the backend
	// exporter got and the file, by design, did not (metrics only). With
	// delivery from the files (no backend exporter) they reach neither:
	// the backend gets what the files hold.
	FileFiltered int64 `json:"file_filtered,omitempty"`
	// Sent is otelcol_exporter_sent_* of otlp_http/backend: items the
	// backend accepted.
	Sent int64 `json:"sent"`
	// SendFailed is otelcol_exporter_send_failed_* of otlp_http/backend:
	// items the backend refused or that were lost after the retries.
	SendFailed int64 `json:"send_failed"`
	// EnqueueFailed is otelcol_exporter_enqueue_failed_* of
	// otlp_http/backend: items its sending queue dropped because it was
	// full (its bytes bound: the backend down, hung, slow or throttling
	// for longer than the queue holds). They are in the files: the queue
	// is fed after the file exporter, and never refuses to the producer.
	EnqueueFailed int64 `json:"enqueue_failed"`
}

// Lost is the items the backend did not get although the collector tried:
// SendFailed + EnqueueFailed.
func (c Counts) Lost() int64 { return c.SendFailed + c.EnqueueFailed }

// Receipt is one node's otel/receipt.json.
type Receipt struct {
	// Version is the format version (Version).
	Version int `json:"version"`
	// JobID is the Slurm job id; Node the node's short name.
	JobID string `json:"job_id"`
	Node  string `json:"node"`
	// RestartCount is Slurm's restart count of the run ("" unknown).
	RestartCount string `json:"restart_count,omitempty"`
	// WrittenAt is when the receipt was written (UTC).
	WrittenAt time.Time `json:"written_at"`
	// Basis is BasisFinal, BasisLastRead or BasisNone.
	Basis string `json:"basis"`
	// Collectors is how many collector processes the figures cover (1 +
	// the restarts within the run, + 1 after the final scrape at the
	// batch script's end, which stops one run and starts the next).
	Collectors int `json:"collectors"`
	// Unknown says, one sentence each, what is not known and why (empty
	// when Basis is BasisFinal, but for items the two exporters of a
	// signal did not both account for).
	Unknown []string `json:"unknown,omitempty"`
	// Signals holds the counts by signal ("traces", "metrics", "logs").
	// A signal without a pipeline (logs turned off) is absent.
	Signals map[string]Counts `json:"signals"`
	// WriteTrouble says, in one sentence, why the files could not be
	// written ("" when every write succeeded): the file system of the
	// output dir full at the drain, or refusing writes for another reason
	// (a quota). Set whenever a signal's WriteFailed is not 0.
	WriteTrouble string `json:"write_trouble,omitempty"`
	// Appended lists the lines the supervisor appended to the jsonl files
	// after the collector had exited (the drain's and the epilog's phase
	// spans): they are in the files, and the supervisor sends each to the
	// backend itself once (Appended.Delivered says whether the backend
	// took it); `gym-otel-spank replay --appended DIR` sends those it
	// did not.
	Appended []Appended `json:"appended,omitempty"`
	// Delivery is the supervisor's delivery of the files to the backend
	// (otel.delivery: files; nil: the collector's exporter sent live, and
	// Counts.Sent and Lost say what the backend got).
	Delivery *Delivery `json:"delivery,omitempty"`
	// RemoteExportOff reports that the job sent nothing to a backend by
	// choice (otel.delivery: none): the files are the run's only copy,
	// nothing is missing at a backend, and `gym-otel-spank replay DIR`
	// sends the files whole where wanted.
	RemoteExportOff bool `json:"remote_export_off,omitempty"`
}

// Appended is one line the supervisor appended to a jsonl file after the
// collector had exited.
type Appended struct {
	// File is the jsonl file's name in the node dir ("traces.jsonl").
	File string `json:"file"`
	// Offset is the line's first byte in the file; Length its bytes, the
	// newline included.
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// Spans counts the line's spans (a traces.jsonl line).
	Spans int `json:"spans"`
	// Points counts the line's metric points (a metrics.jsonl line: the
	// span metrics of the appended spans, which no connector counted, and
	// of the spans the connector had not exported at its stop).
	Points int `json:"points,omitempty"`
	// Delivered reports whether the supervisor sent the line to the
	// backend itself right after appending it (once, bounded, the backend
	// accepting every span); a receipt written before the delivery, or by
	// an older supervisor, reads false.
	Delivered bool `json:"delivered"`
	// HTTPStatus is the backend's HTTP status when a delivery failed with
	// one (0: no answer, or none named).
	HTTPStatus int `json:"http_status,omitempty"`
	// Cause says, in one line, why the line was not delivered ("" when
	// Delivered): no backend configured, the backend's answer, a timeout.
	Cause string `json:"cause,omitempty"`
}

// Complete reports whether the figures are exact (BasisFinal).
func (r *Receipt) Complete() bool { return r.Basis == BasisFinal }

// Trouble reports whether anything was lost or refused on the way: items
// the backend did not get (send or enqueue failures), items a receiver
// refused, or items that could not be written to the files.
func (r *Receipt) Trouble() bool {
	for _, c := range r.Signals {
		if c.Lost() > 0 || c.Refused > 0 || c.WriteFailed > 0 {
			return true
		}
	}
	return false
}

// Validate checks the fields Read relies on.
func (r *Receipt) Validate() error {
	if r.Version != Version {
		return fmt.Errorf("version %d, this gym-otel-spank reads version %d", r.Version, Version)
	}
	switch r.Basis {
	case BasisFinal, BasisLastRead, BasisNone:
	default:
		return fmt.Errorf("basis %q is not %s, %s or %s", r.Basis, BasisFinal, BasisLastRead, BasisNone)
	}
	if r.Basis != BasisFinal && len(r.Unknown) == 0 {
		return fmt.Errorf("basis %q without a word on what is unknown", r.Basis)
	}
	for i, a := range r.Appended {
		if !isSignal(strings.TrimSuffix(a.File, ".jsonl")) || !strings.HasSuffix(a.File, ".jsonl") || a.Offset < 0 || a.Length <= 0 || a.Spans < 0 || a.Points < 0 {
			return fmt.Errorf("appended[%d]: file %q offset %d length %d: not a line of a jsonl file", i, a.File, a.Offset, a.Length)
		}
		if a.HTTPStatus != 0 && (a.HTTPStatus < 100 || a.HTTPStatus > 599) {
			return fmt.Errorf("appended[%d]: http_status %d is not an HTTP status", i, a.HTTPStatus)
		}
	}
	if r.Delivery != nil {
		if err := r.Delivery.validate(); err != nil {
			return err
		}
	}
	for sig, c := range r.Signals {
		if !isSignal(sig) {
			return fmt.Errorf("signals: %q is not traces, metrics or logs", sig)
		}
		if c.Received < 0 || c.Refused < 0 || c.Written < 0 || c.WriteFailed < 0 || c.FileFiltered < 0 || c.Sent < 0 || c.SendFailed < 0 || c.EnqueueFailed < 0 {
			return fmt.Errorf("signals.%s: a negative count", sig)
		}
	}
	return nil
}

func isSignal(s string) bool {
	for _, x := range Signals {
		if s == x {
			return true
		}
	}
	return false
}

// Write writes r as dir/receipt.json (mode 0644, owned by the calling
// process's user) through a temporary file of a random name in dir, renamed
// into place: a reader sees the old receipt or the new one, never half. It
// sets Version and, when zero, WrittenAt. Errors: an invalid receipt, or
// the file system's.
func (r *Receipt) Write(dir string) error {
	r.Version = Version
	if r.WrittenAt.IsZero() {
		r.WrittenAt = time.Now().UTC()
	}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("receipt: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, FileName), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("receipt: %w", err)
	}
	return nil
}

// Read reads dir/receipt.json. Errors name the file: a missing receipt
// (errors.Is(err, fs.ErrNotExist): the collector has not drained yet, or the
// supervisor was killed before it could write one), a file that is not
// JSON, or a receipt that does not validate.
func Read(dir string) (*Receipt, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: no receipt (it is written when the collector drains; a supervisor killed before its drain writes none): %w", path, fs.ErrNotExist)
	}
	if err != nil {
		return nil, err
	}
	r := &Receipt{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("%s: not a receipt: %w", path, err)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// itemWord names a signal's items.
var itemWord = map[string]string{"traces": "spans", "metrics": "metric points", "logs": "log records"}

// Summary is the receipt in a few lines for the first lines of inspect: a
// headline, a line per signal, and a plain line for each loss (backend
// refused or lost data, receivers refused, files not written) and for what
// is unknown. Figures that are lower bounds say "at least".
func (r *Receipt) Summary() []string {
	head := fmt.Sprintf("receipt of job %s on %s", r.JobID, r.Node)
	if r.Collectors > 1 {
		head += fmt.Sprintf(" (%d collector runs)", r.Collectors)
	}
	switch r.Basis {
	case BasisFinal:
		head += ": final figures"
	case BasisLastRead:
		head += ": INCOMPLETE, figures are lower bounds"
	case BasisNone:
		head += ": NO FIGURES"
	}
	lines := []string{head}
	atLeast := ""
	if r.Basis == BasisLastRead {
		atLeast = ">="
	}
	var trouble []string
	for _, sig := range Signals {
		c, ok := r.Signals[sig]
		if !ok || r.Basis == BasisNone {
			continue
		}
		if r.Delivery != nil || r.RemoteExportOff {
			lines = append(lines, fmt.Sprintf("  %-7s received %s%d, written %s%d", sig, atLeast, c.Received, atLeast, c.Written))
		} else {
			lines = append(lines, fmt.Sprintf("  %-7s received %s%d, written %s%d, sent to the backend %s%d, failed %s%d",
				sig, atLeast, c.Received, atLeast, c.Written, atLeast, c.Sent, atLeast, c.Lost()))
		}
		switch {
		case c.FileFiltered > 0 && r.Delivery != nil:
			// Delivery from the files: the backend gets what the files
			// hold, so the allowlist keeps these from both.
			lines = append(lines, fmt.Sprintf("          (%d node_exporter points outside local_node_metrics were kept out of the file, and so out of the backend's copy)", c.FileFiltered))
		case c.FileFiltered > 0:
			lines = append(lines, fmt.Sprintf("          (%d node_exporter points outside local_node_metrics went to the backend only, not to the file)", c.FileFiltered))
		}
		if sig == "metrics" && c.Written > c.Received {
			lines = append(lines, "          (written > received: the span metrics are made in the collector from the spans, not received)")
		}
		w := itemWord[sig]
		if c.Lost() > 0 {
			t := fmt.Sprintf("the backend did not get %s%d of %s%d %s", atLeast, c.Lost(), atLeast, c.Sent+c.Lost(), w)
			var why []string
			if c.SendFailed > 0 {
				why = append(why, fmt.Sprintf("%d refused or failed to send", c.SendFailed))
			}
			if c.EnqueueFailed > 0 {
				why = append(why, fmt.Sprintf("%d dropped by the export queue, full while the backend lagged", c.EnqueueFailed))
			}
			trouble = append(trouble, t+" ("+strings.Join(why, ", ")+")")
		}
		if c.Refused > 0 {
			trouble = append(trouble, fmt.Sprintf("the collector's receivers refused %s%d %s (not in the files either)", atLeast, c.Refused, w))
		}
		if c.WriteFailed > 0 {
			why := r.WriteTrouble
			if why == "" {
				why = "the file system refused the writes"
			}
			if r.Delivery != nil {
				// Delivery from the files: the backend gets what the
				// files hold, so these are at neither.
				trouble = append(trouble, fmt.Sprintf("%s%d %s not written to %s.jsonl: %s; they are in no file and so not at the backend either (it gets the files)",
					atLeast, c.WriteFailed, w, sig, why))
			} else {
				trouble = append(trouble, fmt.Sprintf("%s%d %s not written to %s.jsonl: %s; they are in no file, the backend exporter got them all the same",
					atLeast, c.WriteFailed, w, sig, why))
			}
		}
	}
	for _, t := range trouble {
		lines = append(lines, "  LOST: "+t)
	}
	if len(trouble) > 0 {
		lost, unwritten := false, false
		for _, c := range r.Signals {
			lost = lost || c.Lost() > 0
			unwritten = unwritten || c.WriteFailed > 0
		}
		switch {
		case lost && unwritten:
			lines = append(lines, "  the files hold what the backend missed, but for what could not be written: `gym-otel-spank replay DIR` sends this node's files whole (they cannot tell which items were lost: the backend gets the others twice) and skips the nodes whose receipts say the backend has everything")
		case lost:
			lines = append(lines, "  the files hold what the backend missed: `gym-otel-spank replay DIR` sends this node's files whole (they cannot tell which items were lost: the backend gets the others twice) and skips the nodes whose receipts say the backend has everything")
		}
	}
	for _, a := range r.Appended {
		l := fmt.Sprintf("  appended after the collector's exit: %d phase spans (the drain's, the epilog's, any the collector did not take) in %s", a.Spans, a.File)
		if a.File == "metrics.jsonl" {
			l = fmt.Sprintf("  appended after the collector's exit: %d span metric points (of the spans the collector's span metrics did not count) in %s", a.Points, a.File)
		}
		switch {
		case r.RemoteExportOff:
		case a.Delivered:
			l += ", delivered to the backend by the supervisor"
		case r.Delivery != nil:
			l += ", not acknowledged by the backend (past the delivery checkpoint: `gym-otel-spank replay DIR` sends it)"
		default:
			why := a.Cause
			if why == "" {
				why = "no delivery recorded"
			}
			l += fmt.Sprintf(", NOT delivered to the backend (%s): `gym-otel-spank replay --appended DIR` sends them", why)
		}
		lines = append(lines, l)
	}
	if r.Delivery != nil {
		lines = append(lines, r.Delivery.Summary()...)
	}
	if r.RemoteExportOff {
		lines = append(lines, "  remote export off (otel.delivery: none): nothing sent to a backend; the files are the run's copy (`gym-otel-spank replay DIR` sends them)")
	}
	for _, u := range r.Unknown {
		lines = append(lines, "  UNKNOWN: "+u)
	}
	return lines
}
