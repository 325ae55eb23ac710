package inspect

import (
	"bytes"
	"strconv"
)

// The OTLP-JSON shapes the collector's file exporter writes (one
// ExportMetricsServiceRequest, ExportTraceServiceRequest or
// ExportLogsServiceRequest per line, protobuf JSON mapping: 64-bit integers
// as strings, enums as numbers), reduced to the fields the report reads.

// num is a JSON number that may come as a string (int64, uint64 and fixed64
// fields) or as a number (double fields).
type num float64

func (n *num) UnmarshalJSON(b []byte) error {
	b = bytes.Trim(b, `"`)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	switch string(b) {
	case "NaN":
		*n = num(nan)
		return nil
	case "Infinity":
		*n = num(posInf)
		return nil
	case "-Infinity":
		*n = num(negInf)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return err
	}
	*n = num(f)
	return nil
}

// nanos is a timeUnixNano field (a decimal string).
type nanos int64

func (t *nanos) UnmarshalJSON(b []byte) error {
	b = bytes.Trim(b, `"`)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return err
	}
	*t = nanos(v)
	return nil
}

func (t nanos) ms() int64 { return int64(t) / 1e6 }

type anyValue struct {
	StringValue *string  `json:"stringValue"`
	IntValue    *string  `json:"intValue"`
	DoubleValue *float64 `json:"doubleValue"`
	BoolValue   *bool    `json:"boolValue"`
}

// text is the value as the report shows it.
func (v anyValue) text() string {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.IntValue != nil:
		return *v.IntValue
	case v.DoubleValue != nil:
		return strconv.FormatFloat(*v.DoubleValue, 'g', -1, 64)
	case v.BoolValue != nil:
		return strconv.FormatBool(*v.BoolValue)
	}
	return ""
}

type attr struct {
	Key   string   `json:"key"`
	Value anyValue `json:"value"`
}

type attrs []attr

func (as attrs) get(key string) string {
	for _, a := range as {
		if a.Key == key {
			return a.Value.text()
		}
	}
	return ""
}

type resource struct {
	Attributes attrs `json:"attributes"`
}

type numberPoint struct {
	Attributes attrs `json:"attributes"`
	Time       nanos `json:"timeUnixNano"`
	AsDouble   *num  `json:"asDouble"`
	AsInt      *num  `json:"asInt"`
	Flags      int   `json:"flags"`
}

func (p numberPoint) value() (float64, bool) {
	switch {
	case p.Flags&1 != 0: // no recorded value (a staleness marker)
		return 0, false
	case p.AsDouble != nil:
		return float64(*p.AsDouble), true
	case p.AsInt != nil:
		return float64(*p.AsInt), true
	}
	return 0, false
}

type histogramPoint struct {
	Attributes     attrs     `json:"attributes"`
	Start          nanos     `json:"startTimeUnixNano"`
	Time           nanos     `json:"timeUnixNano"`
	Count          num       `json:"count"`
	Sum            num       `json:"sum"`
	BucketCounts   []num     `json:"bucketCounts"`
	ExplicitBounds []float64 `json:"explicitBounds"`
	Min            *num      `json:"min"`
	Max            *num      `json:"max"`
	Flags          int       `json:"flags"`
}

type metric struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	Sum  *struct {
		DataPoints  []numberPoint `json:"dataPoints"`
		Temporality int           `json:"aggregationTemporality"`
		IsMonotonic bool          `json:"isMonotonic"`
	} `json:"sum"`
	Gauge *struct {
		DataPoints []numberPoint `json:"dataPoints"`
	} `json:"gauge"`
	Histogram *struct {
		DataPoints  []histogramPoint `json:"dataPoints"`
		Temporality int              `json:"aggregationTemporality"`
	} `json:"histogram"`
	// Exponential histograms and summaries are counted, not read.
	ExponentialHistogram *struct {
		DataPoints []struct{} `json:"dataPoints"`
	} `json:"exponentialHistogram"`
	Summary *struct {
		DataPoints []struct{} `json:"dataPoints"`
	} `json:"summary"`
}

// temporalityDelta is AGGREGATION_TEMPORALITY_DELTA.
const temporalityDelta = 1

type span struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Start        nanos  `json:"startTimeUnixNano"`
	End          nanos  `json:"endTimeUnixNano"`
	Attributes   attrs  `json:"attributes"`
	Status       struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
	// Links are the span's links (the trace tree follows a rollout's
	// link to its process's span, tree.go).
	Links []struct {
		TraceID string `json:"traceId"`
		SpanID  string `json:"spanId"`
	} `json:"links"`
}

// statusError is STATUS_CODE_ERROR.
const statusError = 2

type logRecord struct {
	Time           nanos    `json:"timeUnixNano"`
	Observed       nanos    `json:"observedTimeUnixNano"`
	SeverityNumber int      `json:"severityNumber"`
	SeverityText   string   `json:"severityText"`
	Body           anyValue `json:"body"`
	TraceID        string   `json:"traceId"`
	SpanID         string   `json:"spanId"`
}

// otlpLine is one line of metrics.jsonl, traces.jsonl or logs.jsonl.
type otlpLine struct {
	ResourceMetrics []struct {
		Resource     resource `json:"resource"`
		ScopeMetrics []struct {
			Metrics []metric `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
	ResourceSpans []struct {
		Resource   resource `json:"resource"`
		ScopeSpans []struct {
			Scope struct {
				Name string `json:"name"`
			} `json:"scope"`
			Spans []span `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
	ResourceLogs []struct {
		Resource  resource `json:"resource"`
		ScopeLogs []struct {
			LogRecords []logRecord `json:"logRecords"`
		} `json:"scopeLogs"`
	} `json:"resourceLogs"`
}
