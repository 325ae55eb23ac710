package delivery

import (
	"encoding/json"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// countItems counts the items of one OTLP-JSON line of signal as an
// exporter counts them (jobdir.CountItems: spans, metric data points, log
// records). ok is false when the line is not a JSON object.
func countItems(signal string, b []byte) (n int64, ok bool) {
	n, _, ok = jobdir.CountItems(signal, b)
	return n, ok
}

// exportResponse is an OTLP/HTTP JSON export response: only its partial
// success (the items the backend rejected and why).
type exportResponse struct {
	PartialSuccess *struct {
		RejectedSpans      jobdir.Int64 `json:"rejectedSpans"`
		RejectedDataPoints jobdir.Int64 `json:"rejectedDataPoints"`
		RejectedLogRecords jobdir.Int64 `json:"rejectedLogRecords"`
		ErrorMessage       string       `json:"errorMessage"`
	} `json:"partialSuccess"`
}

// rejected is the partial success's rejected count of a 2xx response
// body (0 for an empty body, one without a partial success, or one that
// is not JSON: a 2xx is an acceptance), and its message.
func rejected(body []byte) (n int64, msg string) {
	var r exportResponse
	if len(body) == 0 || json.Unmarshal(body, &r) != nil || r.PartialSuccess == nil {
		return 0, ""
	}
	p := r.PartialSuccess
	return int64(p.RejectedSpans + p.RejectedDataPoints + p.RejectedLogRecords), p.ErrorMessage
}
