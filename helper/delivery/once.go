package delivery

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

// Answer is the backend's answer to one request of Once.
type Answer struct {
	// Items are the request's items (spans, metric data points, log
	// records), counted as an exporter counts them.
	Items int64
	// Status is the answer's HTTP status.
	Status int
	// Accepted and Rejected split Items by a 2xx answer's partial success;
	// on any other status Accepted is 0 and Rejected is Items.
	Accepted, Rejected int64
	// Message is a partial success's error message, or the start (at
	// most 200 bytes) of a refusal's body.
	Message string
}

// OK reports whether the backend accepted every item.
func (a Answer) OK() bool { return a.Status/100 == 2 && a.Rejected == 0 }

// Cause is why the backend did not take every item, in one line ("" when
// it did): the status and the backend's words.
func (a Answer) Cause() string {
	if a.OK() {
		return ""
	}
	msg := strings.Join(strings.Fields(a.Message), " ")
	if a.Status/100 == 2 {
		return fmt.Sprintf("the backend rejected %d of %d items (partial success: %s)", a.Rejected, a.Items, msg)
	}
	if msg != "" {
		msg = ": " + msg
	}
	return fmt.Sprintf("the backend answered HTTP %d %s%s", a.Status, http.StatusText(a.Status), msg)
}

// Once sends one OTLP-JSON export request of signal (one line as the
// file exporter writes it, its newline optional) to opt.Endpoint in one
// attempt, as Run sends a request: opt's Headers, Compression, Timeout,
// Client and ResourceAttributes apply; nothing else of opt is used (no
// checkpoint, no retry, no rate cap, no batching). It is the one-shot
// sender of lines that are in no checkpoint's way (the drain's appended
// lines under otel.delivery: collector). The error is nil when the
// backend answered, whatever the status (Answer.OK); else it says why
// nothing was answered: the options (naming the field), a line that is
// not OTLP-JSON of signal, no connection, the request's timeout or ctx.
func Once(ctx context.Context, opt Options, signal string, line []byte) (Answer, error) {
	if _, ok := resourceKeys[signal]; !ok {
		return Answer{}, fmt.Errorf("signal %q: not traces, metrics or logs", signal)
	}
	if err := opt.checkWire(); err != nil {
		return Answer{}, err
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	opt.client()
	items, part, ok := opt.linePart(signal, line)
	if !ok {
		return Answer{}, fmt.Errorf("the %s line is not an OTLP-JSON export request", signal)
	}
	var b batch
	if len(part) > 0 {
		b.parts = [][]byte{part}
	}
	target, payload := opt.request(signal, b.body(signal))
	status, body, _, _, err := opt.post(ctx, target, payload)
	a := Answer{Items: items, Status: status}
	if err != nil {
		return a, err
	}
	if status/100 == 2 {
		n, msg := rejected(body)
		a.Rejected = min(max(n, 0), items)
		a.Accepted, a.Message = items-a.Rejected, msg
		return a, nil
	}
	a.Rejected, a.Message = items, string(body[:min(len(body), 200)])
	return a, nil
}
