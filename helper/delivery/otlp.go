package delivery

import (
	"encoding/json"
	"strconv"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// countItems counts the items of one OTLP-JSON line of signal as an
// exporter counts them (jobdir.CountItems: spans, metric data points, log
// records). ok is false when the line is not a JSON object.
func countItems(signal string, b []byte) (n int64, ok bool) {
	n, _, ok = jobdir.CountItems(signal, b)
	return n, ok
}

// int64JSON is an int64 as OTLP-JSON writes it: a string (the protobuf
// JSON mapping of int64) or a number.
type int64JSON int64

func (v *int64JSON) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		*v = int64JSON(n)
		return err
	}
	var n int64
	err := json.Unmarshal(b, &n)
	*v = int64JSON(n)
	return err
}

// exportResponse is an OTLP/HTTP JSON export response: only its partial
// success (the items the backend rejected and why).
type exportResponse struct {
	PartialSuccess *struct {
		RejectedSpans      int64JSON `json:"rejectedSpans"`
		RejectedDataPoints int64JSON `json:"rejectedDataPoints"`
		RejectedLogRecords int64JSON `json:"rejectedLogRecords"`
		ErrorMessage       string    `json:"errorMessage"`
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
