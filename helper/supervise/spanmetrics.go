package supervise

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// The span metrics of the spans the supervisor appends after the
// collector's exit (afterdrain.go), where the job's files are too large
// to count every span at the drain (spancount.go, which writes the same
// shape). No span_metrics connector sees them,
// so the supervisor counts them itself: one OTLP-JSON line appended to
// metrics.jsonl with the points the connector would have made of them
// (read from the connector's own output): the resource the connector
// gives the phase spans' series (render.Identity with the host, without
// the source mark: the metrics pipeline takes it off), the scope
// spanmetricsconnector, and per series (span name, kind, status code) a
// monotonic cumulative sum SpanMetricsCalls and a histogram
// SpanMetricsDuration in ms with the connector's default bounds, each
// point with the dimensions service.name, span.name, span.kind,
// status.code and service.name.override.

const (
	// SpanMetricsCalls is the connector's call counter (its namespace
	// traces.span.metrics, render's connector settings).
	SpanMetricsCalls = "traces.span.metrics.calls"
	// SpanMetricsDuration is the connector's duration histogram (ms).
	SpanMetricsDuration = "traces.span.metrics.duration"
	// spanMetricsScope is the connector's instrumentation scope.
	spanMetricsScope = "spanmetricsconnector"
)

// spanMetricsBounds are the connector's default explicit bucket bounds in
// ms, as its histograms carry them.
var spanMetricsBounds = []float64{2, 4, 6, 8, 10, 50, 100, 200, 400, 800, 1000, 1400, 2000, 5000, 10000, 15000}

type (
	jsonNumberPoint struct {
		Attributes []jsonKV `json:"attributes"`
		Start      string   `json:"startTimeUnixNano"`
		Time       string   `json:"timeUnixNano"`
		AsInt      string   `json:"asInt"`
	}
	jsonHistogramPoint struct {
		Attributes     []jsonKV  `json:"attributes"`
		Start          string    `json:"startTimeUnixNano"`
		Time           string    `json:"timeUnixNano"`
		Count          string    `json:"count"`
		Sum            float64   `json:"sum"`
		BucketCounts   []string  `json:"bucketCounts"`
		ExplicitBounds []float64 `json:"explicitBounds"`
	}
	jsonMetric struct {
		Name string `json:"name"`
		Unit string `json:"unit,omitempty"`
		Sum  *struct {
			DataPoints             []jsonNumberPoint `json:"dataPoints"`
			AggregationTemporality int               `json:"aggregationTemporality"`
			IsMonotonic            bool              `json:"isMonotonic"`
		} `json:"sum,omitempty"`
		Histogram *struct {
			DataPoints             []jsonHistogramPoint `json:"dataPoints"`
			AggregationTemporality int                  `json:"aggregationTemporality"`
		} `json:"histogram,omitempty"`
	}
)

// jsonMetricsLine is one OTLP-JSON metrics line of one resource and one
// scope; M is the shape of its metrics (a sum and a histogram for the span
// metrics, gauges for the energy).
type jsonMetricsLine[M any] struct {
	ResourceMetrics []jsonResourceMetrics[M] `json:"resourceMetrics"`
}

type jsonResourceMetrics[M any] struct {
	Resource struct {
		Attributes []jsonKV `json:"attributes"`
	} `json:"resource"`
	ScopeMetrics []jsonScopeMetrics[M] `json:"scopeMetrics"`
}

type jsonScopeMetrics[M any] struct {
	Scope struct {
		Name string `json:"name"`
	} `json:"scope"`
	Metrics []M `json:"metrics"`
}

// metricsLine is metrics of scope on resource res as one OTLP-JSON line,
// newline included. Errors: json.Marshal's.
func metricsLine[M any](res []jsonKV, scope string, metrics []M) ([]byte, error) {
	rm := jsonResourceMetrics[M]{ScopeMetrics: []jsonScopeMetrics[M]{{Metrics: metrics}}}
	rm.Resource.Attributes = res
	rm.ScopeMetrics[0].Scope.Name = scope
	b, err := json.Marshal(jsonMetricsLine[M]{ResourceMetrics: []jsonResourceMetrics[M]{rm}})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// spanSeries is one series of the connector: its dimensions' values and
// what it counted.
type spanSeries struct {
	name, kind, status string
	first              uint64 // the earliest span end, unix ns
	calls              int64
	sumMs              float64
	buckets            []int64
}

// SpanMetricsLine is the span metrics of spans, counted as the
// span_metrics connector counts them, as one OTLP-JSON line (newline
// included) for metrics.jsonl: resource identity (strings or Ints; its
// service.name is the points' service.name, its service.name.override
// theirs), two metrics (SpanMetricsCalls, SpanMetricsDuration) of one
// point per (span name, kind, status code), in the order of their first
// span; the points' time is now. Errors: an Int attribute that is not
// one, no spans.
func SpanMetricsLine(identity []render.Attr, spans []*tracev1.Span, now time.Time) ([]byte, error) {
	if len(spans) == 0 {
		return nil, fmt.Errorf("no spans to count")
	}
	res, err := resourceAttrs(identity)
	if err != nil {
		return nil, err
	}
	var service, override string
	for _, a := range identity {
		switch a.Key {
		case "service.name":
			service = a.Value
		case "service.name.override":
			override = a.Value
		}
	}
	var order []*spanSeries
	byKey := map[[3]string]*spanSeries{}
	for _, s := range spans {
		k := [3]string{s.Name, s.Kind.String(), s.GetStatus().GetCode().String()}
		x := byKey[k]
		if x == nil {
			x = &spanSeries{name: k[0], kind: k[1], status: k[2], first: s.EndTimeUnixNano, buckets: make([]int64, len(spanMetricsBounds)+1)}
			byKey[k] = x
			order = append(order, x)
		}
		ms := 0.0
		if s.EndTimeUnixNano > s.StartTimeUnixNano {
			ms = float64(s.EndTimeUnixNano-s.StartTimeUnixNano) / 1e6
		}
		x.calls++
		x.sumMs += ms
		x.buckets[sort.SearchFloat64s(spanMetricsBounds, ms)]++
		x.first = min(x.first, s.EndTimeUnixNano)
	}
	at := strconv.FormatInt(now.UnixNano(), 10)
	calls := jsonMetric{Name: SpanMetricsCalls, Sum: &struct {
		DataPoints             []jsonNumberPoint `json:"dataPoints"`
		AggregationTemporality int               `json:"aggregationTemporality"`
		IsMonotonic            bool              `json:"isMonotonic"`
	}{AggregationTemporality: 2, IsMonotonic: true}}
	dur := jsonMetric{Name: SpanMetricsDuration, Unit: "ms", Histogram: &struct {
		DataPoints             []jsonHistogramPoint `json:"dataPoints"`
		AggregationTemporality int                  `json:"aggregationTemporality"`
	}{AggregationTemporality: 2}}
	for _, x := range order {
		attrs := []jsonKV{jsonStr("service.name", service), jsonStr("span.name", x.name), jsonStr("span.kind", x.kind), jsonStr("status.code", x.status)}
		if override != "" {
			attrs = append(attrs, jsonStr("service.name.override", override))
		}
		start := strconv.FormatUint(min(x.first, uint64(now.UnixNano())), 10)
		calls.Sum.DataPoints = append(calls.Sum.DataPoints, jsonNumberPoint{Attributes: attrs, Start: start, Time: at, AsInt: strconv.FormatInt(x.calls, 10)})
		b := make([]string, len(x.buckets))
		for i, n := range x.buckets {
			b[i] = strconv.FormatInt(n, 10)
		}
		dur.Histogram.DataPoints = append(dur.Histogram.DataPoints, jsonHistogramPoint{Attributes: attrs, Start: start, Time: at,
			Count: strconv.FormatInt(x.calls, 10), Sum: x.sumMs, BucketCounts: b, ExplicitBounds: spanMetricsBounds})
	}
	return metricsLine(jsonAttrs(res), spanMetricsScope, []jsonMetric{calls, dur})
}

func jsonStr(k, v string) jsonKV {
	return jsonKV{Key: k, Value: jsonValue{StringValue: &v}}
}
