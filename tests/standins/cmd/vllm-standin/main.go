// Command vllm-standin serves a vLLM-like Prometheus /metrics endpoint.
//
// The metric names, types, labels and histogram buckets follow vLLM's
// Prometheus exporter (`vllm:` prefix, labels engine and model_name). The
// exposition is the classic Prometheus text format (text/plain; version=0.0.4)
// written by the real client library (github.com/prometheus/client_golang).
// Every scrape advances the counters and adds one latency observation, and
// appends its RFC3339Nano UTC time to --scrape-log; with --count-on request
// only POST /v1/completions does (one request each), so the counters stop
// changing when the job's driver stops sending.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/gym-otel-spank/gym-otel-spank/tests/standins/internal/promserve"
	"github.com/prometheus/client_golang/prometheus"
)

func main() {
	port := flag.Int("port", 8000, "TCP port to listen on")
	listen := flag.String("listen", "127.0.0.1", "address to bind")
	model := flag.String("model", "standin-model", "model_name label value")
	scrapeLog := flag.String("scrape-log", "", "append the RFC3339Nano UTC time of each /metrics scrape to this file")
	countOn := flag.String("count-on", "scrape", "what advances the counters: scrape (each /metrics scrape) or request (each POST /v1/completions)")
	flag.Parse()
	if *countOn != "scrape" && *countOn != "request" {
		log.Fatalf("--count-on: %q is neither scrape nor request", *countOn)
	}
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
	// vLLM's time-to-first-token buckets (vllm/v1/metrics/loggers.py).
	ttft := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vllm:time_to_first_token_seconds",
		Help:    "Histogram of time to first token in seconds.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0},
	}, []string{"engine", "model_name"})
	kvCache := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm:kv_cache_usage_perc",
		Help: "KV-cache usage. 1 means 100 percent usage.",
	}, []string{"engine", "model_name"})
	success := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total",
		Help: "Count of successfully processed requests.",
	}, []string{"engine", "model_name", "finished_reason"})
	reg.MustRegister(running, waiting, prompt, generation, e2e, ttft, kvCache, success)

	// Series exist from the first scrape on.
	running.With(labels).Set(0)
	waiting.With(labels).Set(0)
	prompt.With(labels).Add(0)
	generation.With(labels).Add(0)
	kvCache.With(labels).Set(0)
	success.With(prometheus.Labels{"engine": "0", "model_name": *model, "finished_reason": "stop"}).Add(0)

	latencies := []float64{0.42, 0.75, 1.2, 0.31, 2.2, 0.9, 4.0, 1.7}
	ttfts := []float64{0.03, 0.07, 0.15, 0.3, 0.045, 0.09, 0.6, 0.12}
	var (
		mu    sync.Mutex
		steps int
	)
	// step advances the counters by one scrape or request (the n-th adds
	// 100+7n prompt and 50+3n generation tokens) and returns n and the
	// counters' totals.
	step := func() (n, promptTotal, genTotal int) {
		mu.Lock()
		defer mu.Unlock()
		steps++
		running.With(labels).Set(float64(steps%4 + 1))
		waiting.With(labels).Set(float64(steps % 3))
		prompt.With(labels).Add(float64(100 + 7*steps))
		generation.With(labels).Add(float64(50 + 3*steps))
		e2e.With(labels).Observe(latencies[steps%len(latencies)])
		ttft.With(labels).Observe(ttfts[steps%len(ttfts)])
		kvCache.With(labels).Set(float64(steps%5) / 10)
		success.With(prometheus.Labels{"engine": "0", "model_name": *model, "finished_reason": "stop"}).Inc()
		return steps, 100*steps + 7*steps*(steps+1)/2, 50*steps + 3*steps*(steps+1)/2
	}
	before := func() {
		if *countOn == "scrape" {
			step()
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promserve.Handler(reg, *scrapeLog, before))
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || *countOn != "request" {
			http.Error(w, "POST, with --count-on request", http.StatusMethodNotAllowed)
			return
		}
		n, p, g := step()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"text_completion","model":%q,"choices":[{"index":0,"text":"ok","finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":%d,"completion_tokens":%d},"vllm_prompt_tokens_total":%d,"vllm_generation_tokens_total":%d}`+"\n",
			*model, 100+7*n, 50+3*n, p, g)
	})
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
