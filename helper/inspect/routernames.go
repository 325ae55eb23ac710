package inspect

import (
	"math"
	"sort"
	"strings"
)

// vllm-router's names (vllm-project/router src/metrics.rs at
// 02b9331f9d43f5b1953cb5762f13b6bfbb665ba1), scraped from the router of a
// NeMo Gym vllm_pd service on its own Prometheus port: requests by route,
// and the requests each prefill and decode worker got (PD mode) or each
// worker processed (regular mode).
const (
	mRouterRequests  = "vllm_router_requests_total"
	mRouterPrefill   = "vllm_router_pd_prefill_requests_total"
	mRouterDecode    = "vllm_router_pd_decode_requests_total"
	mRouterProcessed = "vllm_router_processed_requests_total"
	routerPrefix     = "vllm_router_"
)

func init() {
	for _, n := range []string{mRouterRequests, mRouterPrefill, mRouterDecode, mRouterProcessed} {
		tracked[n] = true
	}
}

// Router is what one vllm-router (node, scrape job) routed over the run.
type Router struct {
	Node     string `json:"node"`
	Producer string `json:"producer"`
	// Requests is vllm_router_requests_total over all routes at the last
	// scrape: the requests routed since the router started (across a
	// counter reset, the sum of the runs).
	Requests Value `json:"requests"`
	// Workers are the requests each worker got, counted as Requests:
	// vllm_router_pd_prefill_ and _decode_requests_total per worker
	// (Stage prefill, decode), or
	// vllm_router_processed_requests_total (Stage "") in regular mode,
	// sorted by stage and worker URL.
	Workers []RouterWorker `json:"workers"`
}

// RouterWorker is one backend of a router and the requests it got.
type RouterWorker struct {
	Stage    string `json:"stage,omitempty"`
	Worker   string `json:"worker"`
	Requests Value  `json:"requests"`
}

// routers builds one Router per (node, producer) that sent vllm_router_*.
func (a *aggregator) routers() []Router {
	type key struct{ node, producer string }
	var keys []key
	by := map[key]*Router{}
	workers := map[key]map[[2]string]Value{}
	for _, s := range a.order {
		if !strings.HasPrefix(s.key.metric, routerPrefix) || s.c == nil {
			continue
		}
		k := key{s.key.node, s.key.producer}
		r := by[k]
		if r == nil {
			r = &Router{Node: k.node, Producer: k.producer, Requests: Value(math.NaN())}
			by[k], workers[k] = r, map[[2]string]Value{}
			keys = append(keys, k)
		}
		stage := ""
		switch s.key.metric {
		case mRouterRequests:
			r.Requests = addV(r.Requests, s.c.total())
			continue
		case mRouterPrefill:
			stage = "prefill"
		case mRouterDecode:
			stage = "decode"
		}
		w := [2]string{stage, s.labels["worker"]}
		v, ok := workers[k][w]
		if !ok {
			v = Value(math.NaN())
		}
		workers[k][w] = addV(v, s.c.total())
	}
	var out []Router
	for _, k := range keys {
		r := by[k]
		for w, v := range workers[k] {
			r.Workers = append(r.Workers, RouterWorker{Stage: w[0], Worker: w[1], Requests: v})
		}
		sort.Slice(r.Workers, func(i, j int) bool {
			if r.Workers[i].Stage != r.Workers[j].Stage {
				return r.Workers[i].Stage > r.Workers[j].Stage // prefill before decode
			}
			return r.Workers[i].Worker < r.Workers[j].Worker
		})
		out = append(out, *r)
	}
	return out
}
