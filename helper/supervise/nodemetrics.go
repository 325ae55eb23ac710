package supervise

// The node's readings, pushed to the collector.
//
// The job's cgroups (cgroupmetrics.go), the node's host energy
// (hostenergy.go) and its host power (hwmon.go) are read by the supervisor
// every scrape_interval_seconds and sent as OTLP metrics to the
// collector's receiver of the plugin's own telling (render: otlp/plugin
// at Ports.Plugin, behind the plugin's token, which the job's tasks are
// not given), the receiver that already takes the phase spans. Its
// pipeline (metrics/plugin) stamps the run's identity and the Slurm source
// marker on them, as on every other series.
//
// Why pushed and not scraped: a scrape needs the collector's Prometheus
// receiver, and a job without model services on the node would run it for
// these readings alone; an idle collector without it maps about 7 MiB less
// (docs/performance.md, P4). A push needs no port of its own either.
//
// The series are what the page served before: the same names, points'
// attributes and values; gauges as gauges and counters as cumulative
// monotonic sums, whose start is the series' first reading by this
// supervisor (as the Prometheus receiver set it); the resource names the
// producer "cgroup" (service.name, which the identity moves to
// service.name.override) and the node (service.instance.id). A reading
// is pushed once at the collector's readiness, then every interval, once
// more before the final scrape stops the first collector run and once
// more at the drain before the last run stops: the series' last point is
// the job's end. A push the collector refuses or cannot take is dropped,
// as a failed scrape was (the log counts them): the next reading carries
// the counters' whole values.

import (
	"context"
	"strings"
	"sync"
	"time"

	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcev1 "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// NodeMetricsExportTimeout bounds one push of the node's readings to the
// collector.
const NodeMetricsExportTimeout = 2 * time.Second

// nodeMetricsScope is the pushed metrics' instrumentation scope.
const nodeMetricsScope = "gym-otel-spank/node"

// family is one metric of a reading: its name (vocab), description,
// kind (counter: a cumulative monotonic sum; else a gauge) and points.
type family struct {
	name, help string
	counter    bool
	points     []point
}

// point is one series' value, with its attributes in order.
type point struct {
	labels [][2]string
	value  float64
}

// addPoint appends p to the family named name in fams (created, with
// help and counter, at its first point), keeping the families' order.
func addPoint(fams []family, name, help string, counter bool, p point) []family {
	for i := range fams {
		if fams[i].name == name {
			fams[i].points = append(fams[i].points, p)
			return fams
		}
	}
	return append(fams, family{name: name, help: help, counter: counter, points: []point{p}})
}

// nodeMetrics reads and pushes the node's readings: the job's cgroups
// (nil: none), the host energy (nil: none) and the host power (nil:
// none).
type nodeMetrics struct {
	cg    *cgroupReader
	meter *hostEnergyMeter
	hw    *hwmonPower
	node  string

	mu       sync.Mutex // one reading and push at a time
	starts   map[string]int64
	pushed   int
	failures int
	lastErr  string
}

// newNodeMetrics returns the readings of cg, meter and hw on node; nil
// when all three are nil.
func newNodeMetrics(cg *cgroupReader, meter *hostEnergyMeter, hw *hwmonPower, node string) *nodeMetrics {
	if cg == nil && meter == nil && hw == nil {
		return nil
	}
	return &nodeMetrics{cg: cg, meter: meter, hw: hw, node: node, starts: map[string]int64{}}
}

// read reads every source now.
func (n *nodeMetrics) read() []family {
	var fams []family
	if n.cg != nil {
		fams = append(fams, cgroupFamilies(n.cg.read())...)
	}
	fams = append(fams, n.meter.families()...)
	return append(fams, n.hw.families()...)
}

// request turns fams, read at at, into one export request (MetricsData:
// wire-identical to ExportMetricsServiceRequest). A counter series' start
// is its first reading's time; only the series of this reading are kept
// (a step's group gone with its step is forgotten, so a job of many steps
// does not grow the map).
func (n *nodeMetrics) request(fams []family, at time.Time) *metricsv1.MetricsData {
	now := uint64(at.UnixNano())
	starts := make(map[string]int64, len(n.starts))
	var ms []*metricsv1.Metric
	for _, f := range fams {
		var dps []*metricsv1.NumberDataPoint
		for _, p := range f.points {
			dp := &metricsv1.NumberDataPoint{TimeUnixNano: now, Value: &metricsv1.NumberDataPoint_AsDouble{AsDouble: p.value}}
			for _, l := range p.labels {
				// OTLP's strings are UTF-8 (a step's or a reason's
				// bytes may not be): the whole request would fail.
				// Every value is bounded, as the page's labels were.
				dp.Attributes = append(dp.Attributes, strAttr(l[0], clipLabel(strings.ToValidUTF8(l[1], "\uFFFD"))))
			}
			if f.counter {
				key := seriesKey(f.name, p.labels)
				start, ok := n.starts[key]
				if !ok {
					start = at.UnixNano()
				}
				starts[key] = start
				dp.StartTimeUnixNano = uint64(start)
			}
			dps = append(dps, dp)
		}
		m := &metricsv1.Metric{Name: f.name, Description: f.help}
		if f.counter {
			m.Data = &metricsv1.Metric_Sum{Sum: &metricsv1.Sum{DataPoints: dps, IsMonotonic: true,
				AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE}}
		} else {
			m.Data = &metricsv1.Metric_Gauge{Gauge: &metricsv1.Gauge{DataPoints: dps}}
		}
		ms = append(ms, m)
	}
	n.starts = starts
	return &metricsv1.MetricsData{ResourceMetrics: []*metricsv1.ResourceMetrics{{
		Resource: &resourcev1.Resource{Attributes: []*commonv1.KeyValue{
			strAttr("service.name", vocab.CgroupProducer), strAttr("service.instance.id", n.node)}},
		ScopeMetrics: []*metricsv1.ScopeMetrics{{Scope: &commonv1.InstrumentationScope{Name: nodeMetricsScope}, Metrics: ms}},
	}}}
}

func seriesKey(name string, labels [][2]string) string {
	var b strings.Builder
	b.WriteString(name)
	for _, l := range labels {
		b.WriteString("\x00" + l[0] + "\x00" + l[1])
	}
	return b.String()
}

// push reads every source now and sends the reading to the collector's
// receiver of the plugin's own telling (port, token); a nil n does
// nothing.
// Errors: the request's or the collector's answer (the reading is
// dropped).
func (n *nodeMetrics) push(ctx context.Context, port int, token string) error {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	at := time.Now()
	err := postPlugin(ctx, port, token, "/v1/metrics", n.request(n.read(), at), NodeMetricsExportTimeout)
	if err != nil {
		n.failures++
		n.lastErr = err.Error()
		return err
	}
	n.pushed++
	return nil
}

// close stops the host energy meter's reads.
func (n *nodeMetrics) close() {
	if n != nil {
		n.meter.close()
	}
}

// startNodeMetrics pushes a reading now (the collector is ready) and then
// every scrape interval until the returned stop.
func (s *supervisor) startNodeMetrics(ctx context.Context) (stop func()) {
	if s.nodeMetrics == nil {
		return func() {}
	}
	return tickEvery(time.Duration(s.o.ScrapeIntervalSeconds)*time.Second, true, func() { s.pushNodeMetrics(ctx) })
}

// pushNodeMetrics pushes one reading; a failure is logged at debug level
// (counted for the drain's line).
func (s *supervisor) pushNodeMetrics(ctx context.Context) {
	if err := s.nodeMetrics.push(ctx, s.ports.Plugin, s.ptoken); err != nil {
		s.log.Debugf("the node's readings: %v", err)
	}
}

// endNodeMetrics stops the pushes and pushes the last reading before the
// collector stops at the drain.
func (s *supervisor) endNodeMetrics() {
	if s.nodeMetrics == nil {
		return
	}
	if s.nodeMetricsStop != nil {
		s.nodeMetricsStop()
		s.nodeMetricsStop = nil
	}
	if !s.collGone {
		if err := s.nodeMetrics.push(context.Background(), s.ports.Plugin, s.ptoken); err != nil {
			s.log.Warnf("the node's last cgroup, energy or power reading could not be sent to the collector: %v", err)
		}
	}
	n := s.nodeMetrics
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.failures > 0 {
		s.log.Infof("the node's readings: %d sent to the collector, %d not (last: %s)", n.pushed, n.failures, n.lastErr)
	} else {
		s.log.Infof("the node's readings: %d sent to the collector", n.pushed)
	}
}
