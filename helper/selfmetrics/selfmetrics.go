// Package selfmetrics reads the collector's own telemetry: the counters
// and gauges of its receivers and exporters, from its Prometheus endpoint
// (127.0.0.1:<telemetry port>/metrics, while it runs) or from an OTLP
// export of its own metrics (the one it sends when it shuts down). The
// supervisor makes the receipt of them, and replay decides from them that
// everything was read and sent. The item unit of each signal in the
// metric names is spelled here only; the component ids are render's.
//
// The Prometheus text is parsed with prometheus/common's expfmt, the
// parser of the library that writes it (the collector serves it through
// client_golang).
package selfmetrics

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"
)

// The counters of a receiver or an exporter, as named in Key.Name before
// the item unit (Item): "<counter>_<unit>", e.g. "exporter_sent_spans".
const (
	// ReceiverAccepted counts the items a receiver pushed into a pipeline.
	ReceiverAccepted = "receiver_accepted"
	// ReceiverRefused counts the items a receiver turned away (e.g. the
	// memory limiter refused them).
	ReceiverRefused = "receiver_refused"
	// ReceiverFailed counts the items a receiver failed to process.
	ReceiverFailed = "receiver_failed"
	// ExporterSent counts the items an exporter delivered.
	ExporterSent = "exporter_sent"
	// ExporterSendFailed counts the items an exporter failed to deliver
	// (refused, or lost after the retries).
	ExporterSendFailed = "exporter_send_failed"
	// ExporterEnqueueFailed counts the items an exporter's sending queue
	// dropped because it was full.
	ExporterEnqueueFailed = "exporter_enqueue_failed"
)

// queueSize is the gauge of an exporter's sending queue: its batches (no
// item unit).
const queueSize = "exporter_queue_size"

// FilterFiltered is a filter processor's counter of the metric data points
// it dropped (otelcol_processor_filter_datapoints_filtered; Component is
// the processor's id, its "filter" label).
const FilterFiltered = "processor_filter_datapoints_filtered"

// ScrapeTimeout bounds one read of the Prometheus endpoint (Scrape).
const ScrapeTimeout = 2 * time.Second

// Unit is how the collector's metric names count signal's items: "spans"
// (traces), "metric_points" (metrics), "log_records" (logs); "" for
// another signal.
func Unit(signal string) string {
	switch signal {
	case "traces":
		return "spans"
	case "metrics":
		return "metric_points"
	case "logs":
		return "log_records"
	}
	return ""
}

// Words names signal's items in a sentence: "spans", "metric points",
// "log records".
func Words(signal string) string { return strings.ReplaceAll(Unit(signal), "_", " ") }

// Item is the name of counter's series of signal, e.g.
// Item(ExporterSent, "traces") = "exporter_sent_spans".
func Item(counter, signal string) string { return counter + "_" + Unit(signal) }

// Key names one series: the metric's name without "otelcol_" and
// "_total" (e.g. "exporter_sent_spans"), and the id of the receiver or
// exporter it is of (its "receiver" or "exporter" label or attribute, ""
// when it has none).
type Key struct {
	Name, Component string
}

// Counters are the collector's own receiver and exporter series
// (otelcol_receiver_*, otelcol_exporter_*): counters and gauges, summed
// over their other labels (e.g. the transport), by Key. Values are items,
// except the queue's gauge.
type Counters map[Key]float64

// Of is counter (ReceiverAccepted, ...) of signal's items at component.
func (m Counters) Of(counter, signal, component string) int64 {
	return int64(m[Key{Item(counter, signal), component}])
}

// Sum is counter of signal's items summed over every component.
func (m Counters) Sum(counter, signal string) int64 {
	name := Item(counter, signal)
	var s float64
	for k, v := range m {
		if k.Name == name {
			s += v
		}
	}
	return int64(s)
}

// Filtered is the metric data points the filter processor id dropped.
func (m Counters) Filtered(id string) int64 {
	return int64(m[Key{FilterFiltered, id}])
}

// QueueSize is the number of batches in exporter's sending queue.
func (m Counters) QueueSize(exporter string) int64 {
	return int64(m[Key{queueSize, exporter}])
}

// Add returns m + o: the series of two collector processes of one run
// (a restarted collector counts from zero). Either may be nil.
func (m Counters) Add(o Counters) Counters {
	r := Counters{}
	for k, v := range m {
		r[k] += v
	}
	for k, v := range o {
		r[k] += v
	}
	return r
}

// keyOf is the Key of a series of the metric name, nil when name is not a
// receiver's or an exporter's; label returns the series' label (or
// attribute) value.
func keyOf(name string, label func(string) string) *Key {
	short, ok := strings.CutPrefix(name, "otelcol_")
	if !ok {
		return nil
	}
	short = strings.ReplaceAll(strings.TrimSuffix(short, "_total"), ".", "_")
	switch {
	case short == FilterFiltered:
		return &Key{short, label("filter")}
	case strings.HasPrefix(short, "receiver_"):
		return &Key{short, label("receiver")}
	case strings.HasPrefix(short, "exporter_"):
		return &Key{short, label("exporter")}
	}
	return nil
}

// Scrape reads the collector's Prometheus endpoint on 127.0.0.1:port
// (the rendered telemetry port), within ScrapeTimeout, uncompressed: Go's
// client would otherwise ask for gzip, and the collector would compress
// every read of the supervisor's liveness check (each second) over
// loopback. Errors: the connection, an HTTP status other than 200, or
// ParseText's.
func Scrape(port int) (Counters, error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	client := &http.Client{Timeout: ScrapeTimeout}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("telemetry: HTTP %d", resp.StatusCode)
	}
	return ParseText(resp.Body)
}

// ParseText reads the Prometheus text exposition format (0.0.4, what the
// endpoint serves when no other is asked for): the counter, gauge and
// untyped samples of the receivers and exporters. A document that does
// not parse is an error (expfmt's, with its line), and no figures.
func ParseText(r io.Reader) (Counters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	m := Counters{}
	for name, mf := range families {
		for _, s := range mf.GetMetric() {
			k := keyOf(name, func(l string) string {
				for _, lp := range s.GetLabel() {
					if lp.GetName() == l {
						return lp.GetValue()
					}
				}
				return ""
			})
			if k == nil {
				break
			}
			switch {
			case s.Counter != nil:
				m[*k] += s.GetCounter().GetValue()
			case s.Gauge != nil:
				m[*k] += s.GetGauge().GetValue()
			case s.Untyped != nil:
				m[*k] += s.GetUntyped().GetValue()
			}
		}
	}
	return m, nil
}

// ParseOTLP reads an OTLP ExportMetricsServiceRequest in protobuf
// (wire-identical to MetricsData): the sum and gauge points of the
// receivers and exporters, by their "receiver" or "exporter" attribute.
// Errors: a body that does not decode, or one without metrics.
func ParseOTLP(b []byte) (Counters, error) {
	var md metricsv1.MetricsData
	if err := proto.Unmarshal(b, &md); err != nil {
		return nil, err
	}
	m := Counters{}
	seen := false
	for _, rm := range md.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, met := range sm.GetMetrics() {
				seen = true
				points := met.GetSum().GetDataPoints()
				if met.GetGauge() != nil {
					points = met.GetGauge().GetDataPoints()
				}
				for _, dp := range points {
					k := keyOf(met.GetName(), func(l string) string {
						for _, a := range dp.GetAttributes() {
							if a.GetKey() == l {
								return a.GetValue().GetStringValue()
							}
						}
						return ""
					})
					if k == nil {
						break
					}
					v := dp.GetAsDouble()
					if _, ok := dp.GetValue().(*metricsv1.NumberDataPoint_AsInt); ok {
						v = float64(dp.GetAsInt())
					}
					m[*k] += v
				}
			}
		}
	}
	if !seen {
		return nil, errors.New("an export without metrics")
	}
	return m, nil
}
