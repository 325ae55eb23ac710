package lifecycle

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// selfMetrics are the collector's own counters the supervisor reads from
// its telemetry endpoint (Prometheus text on 127.0.0.1:<telemetry>/metrics).
type selfMetrics struct {
	// acceptedSpans sums otelcol_receiver_accepted_spans over receivers.
	acceptedSpans float64
	// backendFailed sums otelcol_exporter_send_failed_* and
	// otelcol_exporter_enqueue_failed_* of exporter otlp_http/backend, by signal.
	backendFailed map[string]float64
	// backendSent sums otelcol_exporter_sent_* of otlp_http/backend, by signal.
	backendSent map[string]float64
}

const backendExporter = `exporter="otlp_http/backend"`

// readSelfMetrics scrapes the collector's own telemetry.
func readSelfMetrics(port int) (selfMetrics, error) {
	m := selfMetrics{backendFailed: map[string]float64{}, backendSent: map[string]float64{}}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("telemetry: HTTP %d", resp.StatusCode)
	}
	return parseSelfMetrics(resp.Body)
}

func parseSelfMetrics(r io.Reader) (selfMetrics, error) {
	m := selfMetrics{backendFailed: map[string]float64{}, backendSent: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, val, ok := splitSample(line)
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "otelcol_receiver_accepted_spans"):
			m.acceptedSpans += val
		case strings.Contains(labels, backendExporter):
			for _, p := range []string{"otelcol_exporter_send_failed_", "otelcol_exporter_enqueue_failed_"} {
				if strings.HasPrefix(name, p) {
					m.backendFailed[signalOf(strings.TrimPrefix(name, p))] += val
				}
			}
			if strings.HasPrefix(name, "otelcol_exporter_sent_") {
				m.backendSent[signalOf(strings.TrimPrefix(name, "otelcol_exporter_sent_"))] += val
			}
		}
	}
	return m, sc.Err()
}

// signalOf maps "spans_total" / "metric_points_total" / "log_records_total"
// to traces, metrics, logs.
func signalOf(suffix string) string {
	switch {
	case strings.HasPrefix(suffix, "spans"):
		return "traces"
	case strings.HasPrefix(suffix, "metric_points"):
		return "metrics"
	case strings.HasPrefix(suffix, "log_records"):
		return "logs"
	}
	return suffix
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

// problems describes backend refusals in one line ("" when none).
func (m selfMetrics) problems() string {
	var parts []string
	for _, sig := range []string{"traces", "metrics", "logs"} {
		if n := m.backendFailed[sig]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %.0f failed", sig, n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "the backend refused or dropped data (" + strings.Join(parts, ", ") + "); the local jsonl files are complete"
}
