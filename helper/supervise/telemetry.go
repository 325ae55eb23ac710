package supervise

import (
	"fmt"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/selfmetrics"
)

// counts turns the collector's own counters (read from its Prometheus
// endpoint while it runs, or from its final OTLP export at shutdown,
// finalSink) into the receipt's figures of one signal: received and
// refused over all receivers, written by file/<signal>, sent by
// otlp_http/backend.
func counts(m selfmetrics.Counters, sig string) receipt.Counts {
	file := render.FileExporter(sig)
	return receipt.Counts{
		Received:      m.Sum(selfmetrics.ReceiverAccepted, sig),
		Refused:       m.Sum(selfmetrics.ReceiverRefused, sig) + m.Sum(selfmetrics.ReceiverFailed, sig),
		Written:       m.Of(selfmetrics.ExporterSent, sig, file),
		WriteFailed:   m.Of(selfmetrics.ExporterSendFailed, sig, file) + m.Of(selfmetrics.ExporterEnqueueFailed, sig, file),
		Sent:          m.Of(selfmetrics.ExporterSent, sig, render.BackendExporter),
		SendFailed:    m.Of(selfmetrics.ExporterSendFailed, sig, render.BackendExporter),
		EnqueueFailed: m.Of(selfmetrics.ExporterEnqueueFailed, sig, render.BackendExporter),
		FileFiltered:  fileFiltered(m, sig),
	}
}

// fileFiltered is what the file's pipeline alone dropped by design: the
// node_exporter series outside local_node_metrics (metrics only).
func fileFiltered(m selfmetrics.Counters, sig string) int64 {
	if sig != "metrics" {
		return 0
	}
	return m.Filtered(render.NodeLocalFilter)
}

// problems describes what the backend did not get in one line ("" when
// nothing was lost).
func problems(m selfmetrics.Counters, signals []string, writeTrouble string) string {
	var lost, unwritten []string
	for _, sig := range signals {
		c := counts(m, sig)
		if n := c.Lost(); n > 0 {
			lost = append(lost, fmt.Sprintf("%s: %d failed", sig, n))
		}
		if n := c.WriteFailed; n > 0 {
			unwritten = append(unwritten, fmt.Sprintf("%d %s not written to %s.jsonl", n, selfmetrics.Words(sig), sig))
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
