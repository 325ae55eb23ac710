package jobdir

import (
	"encoding/json"
	"strconv"
	"strings"
)

// otlpLine holds what is counted of one OTLP-JSON export request.
type otlpLine struct {
	ResourceSpans []struct {
		ScopeSpans []struct {
			Spans []json.RawMessage `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceMetrics []struct {
		ScopeMetrics []struct {
			Metrics []struct {
				Gauge, Sum, Histogram, ExponentialHistogram, Summary *struct {
					DataPoints []json.RawMessage `json:"dataPoints"`
				}
			} `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
	ResourceLogs []struct {
		ScopeLogs []struct {
			LogRecords []json.RawMessage `json:"logRecords"`
		} `json:"scopeLogs"`
	} `json:"resourceLogs"`
}

// CountItems counts one OTLP-JSON line of a job's file of signal
// ("traces", "metrics", "logs"; a line of the collector's file exporter,
// one export request): exported is what an exporter counts of it (spans,
// metric data points, log records), metrics the metrics it holds (0 for
// traces and logs). ok is false when the line is not a JSON object.
func CountItems(signal string, line []byte) (exported, metrics int64, ok bool) {
	var l otlpLine
	if json.Unmarshal(line, &l) != nil {
		return 0, 0, false
	}
	switch signal {
	case "traces":
		for _, rs := range l.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				exported += int64(len(ss.Spans))
			}
		}
	case "metrics":
		for _, rm := range l.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					metrics++
					for _, d := range []*struct {
						DataPoints []json.RawMessage `json:"dataPoints"`
					}{m.Gauge, m.Sum, m.Histogram, m.ExponentialHistogram, m.Summary} {
						if d != nil {
							exported += int64(len(d.DataPoints))
						}
					}
				}
			}
		}
	case "logs":
		for _, rl := range l.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				exported += int64(len(sl.LogRecords))
			}
		}
	}
	return exported, metrics, true
}

// Int64 is a 64-bit integer of an OTLP-JSON line: the protobuf JSON
// mapping writes it as a string ("123"), some writers as a number; null
// or an empty string reads as 0. Errors: anything else that is not a
// whole number.
type Int64 int64

// UnmarshalJSON reads a string or a number.
func (n *Int64) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return err
	}
	*n = Int64(v)
	return nil
}
