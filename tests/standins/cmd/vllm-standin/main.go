// Command vllm-standin serves a vLLM-like Prometheus /metrics endpoint.
//
// The metric names, types, labels and histogram buckets follow vLLM's
// Prometheus exporter (`vllm:` prefix, labels engine and model_name). The
// exposition is the classic Prometheus text format (text/plain; version=0.0.4)
// written by the real client library (github.com/prometheus/client_golang).
// Every scrape advances the counters and adds one latency observation, and
// appends its RFC3339Nano UTC time to --scrape-log.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"

	"github.com/gym-otel-spank/gym-otel-spank/tests/standins/internal/promserve"
	"github.com/prometheus/client_golang/prometheus"
)

func main() {
	port := flag.Int("port", 8000, "TCP port to listen on")
	listen := flag.String("listen", "127.0.0.1", "address to bind")
	model := flag.String("model", "standin-model", "model_name label value")
	scrapeLog := flag.String("scrape-log", "", "append the RFC3339Nano UTC time of each /metrics scrape to this file")
	flag.Parse()
	log.SetPrefix("vllm-standin: ")
	log.SetFlags(0)

	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"engine": "0", "model_name": *model}

	running := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm:num_requests_running",
		Help: "Number of requests in model execution batches.",
	}, []string{"engine", "model_name"})
	waiting := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm:num_requests_waiting",
		Help: "Number of requests waiting to be processed.",
	}, []string{"engine", "model_name"})
	prompt := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:prompt_tokens_total",
		Help: "Number of prefill tokens processed.",
	}, []string{"engine", "model_name"})
	generation := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:generation_tokens_total",
		Help: "Number of generation tokens processed.",
	}, []string{"engine", "model_name"})
	e2e := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vllm:e2e_request_latency_seconds",
		Help:    "Histogram of e2e request latency in seconds.",
		Buckets: []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0},
	}, []string{"engine", "model_name"})
	reg.MustRegister(running, waiting, prompt, generation, e2e)

	// Series exist from the first scrape on.
	running.With(labels).Set(0)
	waiting.With(labels).Set(0)
	prompt.With(labels).Add(0)
	generation.With(labels).Add(0)

	latencies := []float64{0.42, 0.75, 1.2, 0.31, 2.2, 0.9, 4.0, 1.7}
	var scrapes int
	before := func() {
		// Called with the promserve lock held: one scrape at a time.
		scrapes++
		running.With(labels).Set(float64(scrapes%4 + 1))
		waiting.With(labels).Set(float64(scrapes % 3))
		prompt.With(labels).Add(float64(100 + 7*scrapes))
		generation.With(labels).Add(float64(50 + 3*scrapes))
		e2e.With(labels).Observe(latencies[scrapes%len(latencies)])
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promserve.Handler(reg, *scrapeLog, before))
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","owned_by":"vllm"}]}`, *model)
	})

	addr := net.JoinHostPort(*listen, strconv.Itoa(*port))
	if err := promserve.Serve(addr, mux); err != nil {
		log.Fatal(err)
	}
}
