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
		lost = lost || (nr.Receipt != nil && nr.Receipt.Trouble())
	}
	if lost {
		return "NOT everything: " + r.Trouble[0], "lost"
	}
	if len(r.Trouble) > 0 {
		return "unknown: " + r.Trouble[0], "unknown"
	}
	sent := map[string]int64{}
	for _, nr := range r.Receipts {
		if nr.Receipt == nil || !nr.Receipt.Complete() {
			return "unknown: a receipt is missing or incomplete", "unknown"
		}
		for sig, c := range nr.Receipt.Signals {
			sent[sig] += c.Sent
		}
	}
	var parts []string
	for _, sig := range receipt.Signals {
		if n, ok := sent[sig]; ok {
			parts = append(parts, fmt.Sprintf("%d %s", n, map[string]string{"traces": "spans", "metrics": "metric points", "logs": "log records"}[sig]))
		}
	}
	return fmt.Sprintf("nothing lost: the backend accepted all %s (final receipts of %d %s)", strings.Join(parts, ", "),
		len(r.Receipts), plural(len(r.Receipts), "node")), "ok"
}
