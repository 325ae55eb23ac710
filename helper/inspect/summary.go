package inspect

import (
	"fmt"
	"math"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// RunSummary answers "how did my run go" in a few figures: what the HTML
// page opens on, and `summary` in --json.
type RunSummary struct {
	// Rollouts is the rollouts counted (gym.rollout spans, else the
	// gym.rollout.duration_ms histogram's count); null when neither.
	Rollouts Value `json:"rollouts"`
	// PassRate is Gym.VerifySuccess (0..1), Verified the verify results it
	// is over.
	PassRate Value `json:"pass_rate"`
	Verified Value `json:"verified"`
	// ErrorSpans and ErrorLogs are Errors.Spans and Errors.Logs.
	ErrorSpans int `json:"error_spans"`
	ErrorLogs  int `json:"error_logs"`
	// Throughput is the rollouts per minute with the window it was
	// measured over, as text ("" when unknown).
	Throughput string `json:"throughput"`
	// Delivery says what reached the backend: "nothing lost" with the
	// counts the backend accepted, what was lost, or why it is unknown.
	// DeliveryOK is true only for final receipts of every collector dir
	// without any loss; DeliveryState is "ok", "lost" or "unknown".
	Delivery      string `json:"delivery"`
	DeliveryOK    bool   `json:"delivery_ok"`
	DeliveryState string `json:"delivery_state"`
}

// summarise fills r.Summary from the rest of the report (receipts read).
func (r *Report) summarise() {
	s := RunSummary{Rollouts: Value(math.NaN()), PassRate: r.Gym.VerifySuccess, Verified: Value(math.NaN()),
		ErrorSpans: r.Errors.Spans, ErrorLogs: r.Errors.Logs}
	switch {
	case r.Gym.RolloutSpans.Count > 0:
		s.Rollouts = r.Gym.RolloutSpans.Count
	case r.Gym.RolloutHistogram.Count > 0:
		s.Rollouts = r.Gym.RolloutHistogram.Count
	}
	n := 0.0
	for _, v := range r.Gym.Verify {
		n += v
	}
	if n == 0 {
		for _, v := range r.Gym.VerifySpans {
			n += float64(v)
		}
	}
	if n > 0 {
		s.Verified = Value(n)
	}
	if g := r.Gym; g.RolloutsPerMinute.Known() {
		s.Throughput = fmt.Sprintf("%s per minute (%s rollouts in %s)", f(g.RolloutsPerMinute, 1), f(g.RolloutsCounted, 0), dur(g.RolloutsWindowSeconds))
	}
	s.Delivery, s.DeliveryState = r.delivery()
	s.DeliveryOK = s.DeliveryState == "ok"
	r.Summary = s
}

// delivery is the receipts in one sentence, and "ok", "lost" or "unknown".
func (r *Report) delivery() (string, string) {
	if len(r.Receipts) == 0 {
		return "unknown: no collector dir (no collector.yaml) among the dirs read, so no receipt says what the backend got", "unknown"
	}
	lost := false
	for _, nr := range r.Receipts {
		rc := nr.Receipt
		lost = lost || (rc != nil && (rc.Trouble() || undeliveredAppended(rc) > 0 || (rc.Delivery != nil && !rc.Delivery.Complete())))
	}
	if lost {
		if len(r.Trouble) == 0 {
			return "NOT everything: see the receipts below", "lost"
		}
		return "NOT everything: " + r.Trouble[0], "lost"
	}
	if len(r.Trouble) > 0 {
		return "unknown: " + r.Trouble[0], "unknown"
	}
	var rcs []*receipt.Receipt
	off := 0
	for _, nr := range r.Receipts {
		if nr.Receipt == nil || !nr.Receipt.Complete() {
			return "unknown: a receipt is missing or incomplete", "unknown"
		}
		rcs = append(rcs, nr.Receipt)
		if nr.Receipt.RemoteExportOff {
			off++
		}
	}
	if off == len(rcs) {
		return fmt.Sprintf("none by choice: remote export off (otel.delivery: none); the files are the run's copy, nothing lost on the way to them (final receipts of %d %s); `gym-otel-spank replay DIR` sends them",
			len(rcs), plural(len(rcs), "node")), "ok"
	}
	if acked, ok := filesAcknowledged(rcs); ok {
		return fmt.Sprintf("nothing lost: the backend acknowledged all %d items of the files, delivered from them by the supervisor (final receipts of %d %s)",
			acked, len(r.Receipts), plural(len(r.Receipts), "node")), "ok"
	}
	sent, app := sentText(rcs)
	if app != "" {
		app = fmt.Sprintf("; the supervisor delivered %s of them, appended after the collector's exit", app)
	}
	return fmt.Sprintf("nothing lost: the backend accepted all %s (final receipts of %d %s%s)", sent,
		len(r.Receipts), plural(len(r.Receipts), "node"), app), "ok"
}

// filesAcknowledged is the items the backend acknowledged of the files
// where every receipt is of delivery from the files (otel.delivery:
// files), and whether they all are.
func filesAcknowledged(rcs []*receipt.Receipt) (int64, bool) {
	var n int64
	for _, rc := range rcs {
		if rc.Delivery == nil {
			return 0, false
		}
		n += rc.Delivery.Accepted
	}
	return n, len(rcs) > 0
}

// signalWords are the items of each signal, as the report names them.
var signalWords = map[string]string{"traces": "spans", "metrics": "metric points", "logs": "log records"}

// sentText is what the receipts say reached the backend, per signal: the
// collector's sent items with the lines the supervisor appended after the
// collector's exit and delivered itself ("24 spans, 46 metric points, 5
// log records"), so that the count agrees with the files' items; and the
// latter apart ("2 spans and 34 metric points", "" when none).
func sentText(rcs []*receipt.Receipt) (sent, appended string) {
	sentN, appN := map[string]int64{}, map[string]int64{}
	for _, rc := range rcs {
		for sig, c := range rc.Signals {
			sentN[sig] += c.Sent
		}
		for _, a := range rc.Appended {
			if !a.Delivered {
				continue
			}
			sig := strings.TrimSuffix(a.File, ".jsonl")
			n := int64(a.Spans)
			if sig == "metrics" {
				n = int64(a.Points)
			}
			sentN[sig] += n
			appN[sig] += n
		}
	}
	var parts, app []string
	for _, sig := range receipt.Signals {
		if n, ok := sentN[sig]; ok {
			parts = append(parts, fmt.Sprintf("%d %s", n, signalWords[sig]))
		}
		if n := appN[sig]; n > 0 {
			app = append(app, fmt.Sprintf("%d %s", n, signalWords[sig]))
		}
	}
	return strings.Join(parts, ", "), strings.Join(app, " and ")
}

// undeliveredAppended counts the lines the supervisor appended to rc's
// files after the collector's exit that the backend did not take (or whose
// delivery no receipt records): in the files, not at the backend.
func undeliveredAppended(rc *receipt.Receipt) int {
	if rc.Delivery != nil || rc.RemoteExportOff {
		return 0 // delivery from the files: the checkpoint covers the appended lines too; or nothing is sent
	}
	n := 0
	for _, a := range rc.Appended {
		if !a.Delivered {
			n++
		}
	}
	return n
}
