package receipt

import (
	"fmt"
	"time"
)

// Delivery is what the supervisor's delivery of the job's files to the
// backend did (otel.delivery: files; helper/delivery), as of the receipt's
// writing. The checkpoint beside the receipt (delivery.json) holds the
// position; a later `replay` advances it, so the checkpoint, not this
// section, says what the backend has now.
type Delivery struct {
	// Items counts the items (spans, metric points, log records) of the
	// lines the backend answered for: Accepted it took, Rejected it
	// refused for good (a partial success's rejected count, or a 4xx/500
	// that OTLP says not to retry). Accepted + Rejected = Items.
	Items    int64 `json:"items"`
	Accepted int64 `json:"accepted"`
	Rejected int64 `json:"rejected"`
	// Requests counts the export requests sent, Retries those sent again
	// after a failure.
	Requests int64 `json:"requests"`
	Retries  int64 `json:"retries"`
	// DuplicatesBound is an upper bound of the items the backend may hold
	// twice: those of requests sent again after an attempt whose outcome
	// was unknown (a timeout, a connection reset after the request was
	// written), or in flight when a sender was stopped.
	DuplicatesBound int64 `json:"duplicates_bound"`
	// Backlog counts the items of the complete lines past the checkpoint
	// when the receipt was written (BacklogLines the lines): what the
	// backend has not answered for, which `replay DIR` sends. 0: the
	// backend has answered for every line of the files.
	Backlog      int64 `json:"backlog"`
	BacklogLines int64 `json:"backlog_lines"`
	// CatchUps are the backend's outages the delivery saw (a failed
	// attempt after which the backend answered again), in order.
	CatchUps []CatchUp `json:"catch_ups,omitempty"`
	// LastAck is when the backend last answered (zero: never).
	LastAck time.Time `json:"last_ack,omitzero"`
	// Error is why the delivery stopped before the files' end ("" when
	// it did not): the drain's bound ran out, the backend refused the
	// token or the path.
	Error string `json:"error,omitempty"`
}

// CatchUp is one outage of the backend and the catch-up after it.
type CatchUp struct {
	// From is the first failed attempt; Answered the backend's first
	// answer after it (zero: none before the receipt); CaughtUp when the
	// backend had answered for every line written up to then (zero: not
	// caught up before the receipt).
	From     time.Time `json:"from"`
	Answered time.Time `json:"answered,omitzero"`
	CaughtUp time.Time `json:"caught_up,omitzero"`
	// Items counts the items the backend acknowledged from From to
	// CaughtUp (or to the receipt): those that reached it late.
	Items int64 `json:"items"`
}

// Lag is how late the outage's items reached the backend at most: from
// the first failed attempt to the catch-up (0 when not caught up).
func (c CatchUp) Lag() time.Duration {
	if c.CaughtUp.IsZero() {
		return 0
	}
	return c.CaughtUp.Sub(c.From)
}

// Complete reports whether the backend answered for every line of the
// files (Backlog 0 and no error).
func (d *Delivery) Complete() bool { return d.Backlog == 0 && d.BacklogLines == 0 && d.Error == "" }

// validate checks the counts.
func (d *Delivery) validate() error {
	if d.Items < 0 || d.Accepted < 0 || d.Rejected < 0 || d.Requests < 0 || d.Retries < 0 || d.DuplicatesBound < 0 || d.Backlog < 0 || d.BacklogLines < 0 {
		return fmt.Errorf("delivery: a negative count")
	}
	if d.Accepted+d.Rejected != d.Items {
		return fmt.Errorf("delivery: accepted %d + rejected %d is not items %d", d.Accepted, d.Rejected, d.Items)
	}
	return nil
}

// Summary is the delivery in lines for Summary: the backend's
// copy complete, caught up late (the lag), or incomplete (what replay
// sends).
func (d *Delivery) Summary() []string {
	var lines []string
	head := fmt.Sprintf("  backend (delivered from the files): %d items acknowledged", d.Accepted)
	if d.Rejected > 0 {
		head += fmt.Sprintf(", %d rejected by the backend (not sent again)", d.Rejected)
	}
	head += fmt.Sprintf(", %d requests, %d retries, at most %d duplicates", d.Requests, d.Retries, d.DuplicatesBound)
	lines = append(lines, head)
	for _, c := range d.CatchUps {
		switch {
		case !c.CaughtUp.IsZero():
			lines = append(lines, fmt.Sprintf("  caught up late: the backend failed from %s, answered again at %s; %d items reached it up to %v late (caught up %s)",
				c.From.UTC().Format("15:04:05"), c.Answered.UTC().Format("15:04:05"), c.Items, c.Lag().Round(time.Second), c.CaughtUp.UTC().Format("15:04:05")))
		case !c.Answered.IsZero():
			lines = append(lines, fmt.Sprintf("  the backend failed from %s and answered again at %s; not caught up before the receipt (%d items delivered since)",
				c.From.UTC().Format("15:04:05"), c.Answered.UTC().Format("15:04:05"), c.Items))
		default:
			lines = append(lines, fmt.Sprintf("  the backend failed from %s and had not answered again at the receipt", c.From.UTC().Format("15:04:05")))
		}
	}
	if d.Complete() {
		lines = append(lines, "  backend copy COMPLETE: it answered for every line of the files")
	} else {
		l := fmt.Sprintf("  backend copy INCOMPLETE: %d items (%d lines) past the checkpoint were not acknowledged", d.Backlog, d.BacklogLines)
		if d.Error != "" {
			l += " (" + d.Error + ")"
		}
		lines = append(lines, l+": `gym-otel-spank replay DIR` sends exactly those")
	}
	return lines
}
