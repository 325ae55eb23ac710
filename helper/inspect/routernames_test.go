package inspect

import (
	"fmt"
	"strings"
	"testing"
)

// routerScrape is one scrape of a vllm-router's Prometheus port: routed
// requests total, and per worker (prefill a, b; decode d) their totals.
func routerScrape(sec int, routed, a, b, d float64) string {
	sum := func(name, label, worker string, v float64) string {
		attr := `{"key":"route","value":{"stringValue":"/v1/completions"}}`
		if label == "worker" {
			attr = fmt.Sprintf(`{"key":"worker","value":{"stringValue":%q}}`, worker)
		}
		return fmt.Sprintf(`{"name":%q,"sum":{"dataPoints":[{"attributes":[%s,{"key":"gym_service","value":{"stringValue":"pd"}},{"key":"role","value":{"stringValue":"router"}}],"timeUnixNano":"%d","asDouble":%v}],"aggregationTemporality":2,"isMonotonic":true}}`,
			name, attr, ns(sec), v)
	}
	ms := []string{
		sum("vllm_router_requests_total", "route", "", routed),
		sum("vllm_router_pd_prefill_requests_total", "worker", "http://gn2:8001", a),
		sum("vllm_router_pd_prefill_requests_total", "worker", "http://gn3:8001", b),
		sum("vllm_router_pd_decode_requests_total", "worker", "http://gn4:8002", d),
	}
	return fmt.Sprintf(`{"resourceMetrics":[{"resource":%s,"scopeMetrics":[{"metrics":[%s]}]}]}`+"\n", res("gn1", "gym-vllm/pd", "gn1:29000"), strings.Join(ms, ","))
}

// TestRouterFigures: a vllm-router's requests routed and each worker's
// share, the counters at their last scrape (counted from the router's
// start, as the model servers' counters are); no model server is
// made of the router's vllm_router_* names.
func TestRouterFigures(t *testing.T) {
	m := routerScrape(0, 4, 2, 2, 4) + routerScrape(10, 10, 6, 4, 10) + routerScrape(20, 13, 7, 6, 13)
	r, err := Build(writeGymJob(t, m, ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ModelServers) != 0 {
		t.Errorf("model servers %+v, want none (a router is not a vLLM engine)", r.ModelServers)
	}
	if len(r.Routers) != 1 {
		t.Fatalf("routers %+v, want one", r.Routers)
	}
	ro := r.Routers[0]
	if ro.Node != "gn1" || ro.Producer != "gym-vllm/pd" || ro.Requests != 13 {
		t.Errorf("router %s %s requests %v, want gn1 gym-vllm/pd 13", ro.Node, ro.Producer, ro.Requests)
	}
	want := []RouterWorker{{"prefill", "http://gn2:8001", 7}, {"prefill", "http://gn3:8001", 6}, {"decode", "http://gn4:8002", 13}}
	if fmt.Sprint(ro.Workers) != fmt.Sprint(want) {
		t.Errorf("workers %v, want %v", ro.Workers, want)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	var h strings.Builder
	if err := r.WriteHTML(&h, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.String(), `<table id="routers">`) || !strings.Contains(h.String(), "http://gn3:8001") {
		t.Errorf("the HTML report has no routers table with the workers")
	}
	for _, line := range []string{"routers (vllm-router)", "gn1 gym-vllm/pd: requests routed 13", "prefill  http://gn2:8001  7", "decode   http://gn4:8002  13"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("text lacks %q:\n%s", line, b.String())
		}
	}
}
