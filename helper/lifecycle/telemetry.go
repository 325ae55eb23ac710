package lifecycle

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// selfMetrics are the collector's own counters, read from its Prometheus
// telemetry endpoint (127.0.0.1:<telemetry>/metrics, while it runs) or from
// its final OTLP export at shutdown (finalSink). Keys are counterKey:
// the metric name without "otelcol_" and "_total", "|", and the receiver or
// exporter the sample is of, e.g. "exporter_sent_spans|otlp_http/backend".
type selfMetrics map[string]float64

// counterKey is the key of selfMetrics.
func counterKey(name, component string) string {
	name = strings.TrimSuffix(strings.TrimPrefix(name, "otelcol_"), "_total")
	return name + "|" + component
}

// counted reports whether name is one of the collector's item counters the
// receipt is made of.
func counted(name string) bool {
	name = strings.TrimPrefix(name, "otelcol_")
	return strings.HasPrefix(name, "receiver_accepted_") || strings.HasPrefix(name, "receiver_refused_") ||
		strings.HasPrefix(name, "receiver_failed_") || strings.HasPrefix(name, "exporter_sent_") ||
		strings.HasPrefix(name, "exporter_send_failed_") || strings.HasPrefix(name, "exporter_enqueue_failed_")
}

// readSelfMetrics scrapes the collector's own telemetry.
func readSelfMetrics(port int) (selfMetrics, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("telemetry: HTTP %d", resp.StatusCode)
	}
	return parseSelfMetrics(resp.Body)
}

// parseSelfMetrics reads the Prometheus text format: the item counters by
// receiver or exporter label.
func parseSelfMetrics(r io.Reader) (selfMetrics, error) {
	m := selfMetrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, val, ok := splitSample(line)
		if !ok || !counted(name) {
			continue
		}
		comp := labelValue(labels, "receiver")
		if strings.HasPrefix(name, "otelcol_exporter_") {
			comp = labelValue(labels, "exporter")
		}
		m[counterKey(name, comp)] += val
	}
	return m, sc.Err()
}

// labelValue returns the value of label key in `a="x",b="y"` ("" if absent).
func labelValue(labels, key string) string {
	i := strings.Index(","+labels, ","+key+`="`)
	if i < 0 {
		return ""
	}
	rest := labels[i+len(key)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// itemsOf names a signal's items in the collector's metric names.
var itemsOf = map[string]string{"traces": "spans", "metrics": "metric_points", "logs": "log_records"}

// sum adds the counter of every component whose key starts with prefix.
func (m selfMetrics) sum(prefix string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix+"|") {
			s += v
		}
	}
	return s
}

func (m selfMetrics) of(name, component string) float64 { return m[name+"|"+component] }

// acceptedSpans sums otelcol_receiver_accepted_spans over the receivers.
func (m selfMetrics) acceptedSpans() float64 { return m.sum("receiver_accepted_spans") }

// counts turns the counters into the receipt's figures of one signal:
// received and refused over all receivers, written by file/<signal>, sent
// by otlp_http/backend.
func (m selfMetrics) counts(sig string) receipt.Counts {
	it := itemsOf[sig]
	file := render.FileExporter(sig)
	n := func(f float64) int64 { return int64(f) }
	return receipt.Counts{
		Received:      n(m.sum("receiver_accepted_" + it)),
		Refused:       n(m.sum("receiver_refused_"+it) + m.sum("receiver_failed_"+it)),
		Written:       n(m.of("exporter_sent_"+it, file)),
		WriteFailed:   n(m.of("exporter_send_failed_"+it, file) + m.of("exporter_enqueue_failed_"+it, file)),
		Sent:          n(m.of("exporter_sent_"+it, render.BackendExporter)),
		SendFailed:    n(m.of("exporter_send_failed_"+it, render.BackendExporter)),
		EnqueueFailed: n(m.of("exporter_enqueue_failed_"+it, render.BackendExporter)),
	}
}

// add returns m + o (counters of two collector processes of one run).
func (m selfMetrics) add(o selfMetrics) selfMetrics {
	r := selfMetrics{}
	for k, v := range m {
		r[k] += v
	}
	for k, v := range o {
		r[k] += v
	}
	return r
}

// splitSample splits `name{labels} value [timestamp]`.
func splitSample(line string) (name, labels string, val float64, ok bool) {
	rest := line
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:j], line[j+1:]
	} else {
		sp := strings.IndexByte(line, ' ')
		if sp < 0 {
			return "", "", 0, false
		}
		name, rest = line[:sp], line[sp:]
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", "", 0, false
	}
	return name, labels, v, true
}

// problems describes what the backend did not get in one line ("" when
// nothing was lost).
func (m selfMetrics) problems(signals []string, writeTrouble string) string {
	var lost, unwritten []string
	for _, sig := range signals {
		c := m.counts(sig)
		if n := c.Lost(); n > 0 {
			lost = append(lost, fmt.Sprintf("%s: %d failed", sig, n))
		}
		if n := c.WriteFailed; n > 0 {
			unwritten = append(unwritten, fmt.Sprintf("%d %s not written to %s.jsonl", n, itemWord(sig), sig))
		}
	}
	var parts []string
	if len(lost) > 0 {
		p := "the backend refused or dropped data (" + strings.Join(lost, ", ") + ")"
		if len(unwritten) == 0 {
			p += "; the local jsonl files are complete"
		}
		parts = append(parts, p)
	}
	if len(unwritten) > 0 {
		parts = append(parts, "the job's files are INCOMPLETE: "+strings.Join(unwritten, ", ")+": "+writeTrouble+" (receipt.json counts them)")
	}
	return strings.Join(parts, "; ")
}

// itemWord names a signal's items.
func itemWord(sig string) string {
	switch sig {
	case "traces":
		return "spans"
	case "metrics":
		return "metric points"
	}
	return "log records"
}
