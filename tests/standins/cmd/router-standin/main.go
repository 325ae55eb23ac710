// Command router-standin serves what vllm-router (vllm-project/router, the
// router of a NeMo Gym vllm_pd service) serves on its own Prometheus port:
// vllm_router_* with the router's names, types and labels (src/metrics.rs),
// on --prometheus-host:--prometheus-port (vllm-router's defaults,
// 127.0.0.1:29000), not on its API port. The API port answers /health and
// POST /v1/completions (one routed request each, as --count-on request);
// with the default --count-on scrape every scrape of the Prometheus port
// routes one request. The n-th request (n = 1, 2, ...) goes to prefill
// worker (n-1) % len(--prefill) and decode worker (n-1) % len(--decode) and
// takes [0.12 0.4 0.9 0.05 2.5][n%5] s.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/gym-otel-spank/gym-otel-spank/tests/standins/internal/promserve"
	"github.com/prometheus/client_golang/prometheus"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	host := flag.String("host", "127.0.0.1", "address of the router's API")
	port := flag.Int("port", 30000, "the router's API port")
	promHost := flag.String("prometheus-host", "127.0.0.1", "address of the Prometheus listener")
	promPort := flag.Int("prometheus-port", 29000, "port of the Prometheus listener")
	scrapeLog := flag.String("scrape-log", "", "append the RFC3339Nano UTC time of each /metrics scrape to this file")
	countOn := flag.String("count-on", "scrape", "what routes a request: scrape (each /metrics scrape) or request (each POST /v1/completions)")
	var prefill, decode list
	flag.Var(&prefill, "prefill", "a prefill worker URL (repeatable)")
	flag.Var(&decode, "decode", "a decode worker URL (repeatable)")
	flag.Bool("vllm-pd-disaggregation", true, "accepted, as vllm-router takes it")
	flag.Parse()
	log.SetPrefix("router-standin: ")
	log.SetFlags(0)
	if len(prefill) == 0 {
		prefill = list{"http://prefill:8001"}
	}
	if len(decode) == 0 {
		decode = list{"http://decode:8002"}
	}
	if *countOn != "scrape" && *countOn != "request" {
		log.Fatalf("--count-on: %q is neither scrape nor request", *countOn)
	}

	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm_router_requests_total", Help: "Total number of requests by route and method"}, []string{"route"})
	pdRequests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm_router_pd_requests_total", Help: "Total PD requests by route"}, []string{"route"})
	prefillReq := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm_router_pd_prefill_requests_total", Help: "Total prefill requests per worker"}, []string{"worker"})
	decodeReq := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm_router_pd_decode_requests_total", Help: "Total decode requests per worker"}, []string{"worker"})
	// The router's duration buckets (src/metrics.rs start_prometheus).
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "vllm_router_request_duration_seconds", Help: "Request duration in seconds by route",
		Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 45, 60, 90, 120, 180, 240},
	}, []string{"route"})
	active := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vllm_router_active_workers", Help: "Number of currently active workers"})
	health := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm_router_worker_health", Help: "Worker health status (1=healthy, 0=unhealthy)"}, []string{"worker"})
	reg.MustRegister(requests, pdRequests, prefillReq, decodeReq, duration, active, health)
	active.Set(float64(len(prefill) + len(decode)))
	for _, w := range append(append(list{}, prefill...), decode...) {
		health.WithLabelValues(w).Set(1)
	}

	const route = "/v1/completions"
	durations := []float64{0.12, 0.4, 0.9, 0.05, 2.5}
	var (
		mu sync.Mutex
		n  int
	)
	routeOne := func() {
		mu.Lock()
		defer mu.Unlock()
		n++
		requests.WithLabelValues(route).Inc()
		pdRequests.WithLabelValues(route).Inc()
		prefillReq.WithLabelValues(prefill[(n-1)%len(prefill)]).Inc()
		decodeReq.WithLabelValues(decode[(n-1)%len(decode)]).Inc()
		duration.WithLabelValues(route).Observe(durations[n%len(durations)])
	}
	before := func() {
		if *countOn == "scrape" {
			routeOne()
		}
	}

	prom := http.NewServeMux()
	prom.Handle("/metrics", promserve.Handler(reg, *scrapeLog, before))
	api := http.NewServeMux()
	api.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	api.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || *countOn != "request" {
			http.Error(w, "POST, with --count-on request", http.StatusMethodNotAllowed)
			return
		}
		routeOne()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}` + "\n"))
	})
	go func() {
		if err := promserve.Serve(net.JoinHostPort(*host, strconv.Itoa(*port)), api); err != nil {
			log.Fatal(err)
		}
	}()
	if err := promserve.Serve(net.JoinHostPort(*promHost, strconv.Itoa(*promPort)), prom); err != nil {
		log.Fatal(err)
	}
}
