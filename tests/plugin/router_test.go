package plugin_test

import (
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gymschema"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// A Gym vllm_pd service on real Slurm: its router (the router stand-in,
// vllm-router's names on vllm-router's default Prometheus port 29000, on
// 127.0.0.1) runs on the driver's node beside the prefill tier. The node's
// collector scrapes the router's Prometheus port, not its API port, and
// labels its series gym_service=pd, role=router; inspect reads the
// requests routed and each worker's share.
func TestGymRouterScraped(t *testing.T) {
	waitIdle(t)
	for _, name := range []string{"vllm-standin", "router-standin"} {
		if out, err := run("install", "-m", "0755", testenv.Standin(t, name), filepath.Join(plugDir, name)); err != nil {
			t.Fatalf("install %s: %v %s", name, err, out)
		}
	}
	api, _ := strconv.Atoi(shifted(18181)) // not lens_test.go's 18171: its stand-in may outlive its job
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "router-"+tag)
	cfg := fmt.Sprintf(`services:
  pd:
    type: vllm_pd
    container: c
    model: m
    served_model_name: pd-model
    port: %d
    prefill: {node_pool: prefill}
    decode: {node_pool: decode}
compute:
  gymtest:
    type: slurm
    account: a
    node_pools:
      prefill: {partition: p, nodes: 1}
      decode: {partition: p, nodes: 1}
driver:
  gym_install: {ref: v0}
  policy_model: pd
  benchmarks: {b1: {}}
job:
  output_path: %s.run
`, api, base)
	if err := os.WriteFile(base+".gym.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, "router-"+tag+".sh", fmt.Sprintf(`
%[2]s/vllm-standin --port %[3]d --model pd-model --scrape-log %[1]s.prefill-scrapes &
prefill=$!
%[2]s/router-standin --port %[4]d --prometheus-port %[5]d --prefill http://$SLURMD_NODENAME:%[3]d --decode http://decode-node:%[6]d --scrape-log %[1]s.router-scrapes &
router=$!
for i in $(seq 1 1800); do [ $(cat %[1]s.router-scrapes 2>/dev/null | wc -l) -ge 3 ] && break; sleep 0.1; done
kill $prefill $router
wait
`, base, plugDir, api+1, api, gymschema.RouterMetricsPort, api+2))
	r := asUser(t, 5*time.Minute, tokenEnv(), fmt.Sprintf("sbatch -N1 --wait --gym-otel=config=%s.gym.yaml -o %s.out %s", base, base, script))
	if r.code != 0 {
		out, _ := os.ReadFile(base + ".out")
		t.Fatalf("exit %d; stderr %s\n%s", r.code, r.stderr, out)
	}
	jobID := jobIDOf(t, r)
	waitNoCollector(t)
	if b, _ := os.ReadFile(base + ".router-scrapes"); len(strings.Fields(string(b))) < 3 {
		t.Fatalf("job %s: the router's Prometheus port was scraped %d times, want 3 or more", jobID, len(strings.Fields(string(b))))
	}
	dir := base + ".run/otel"
	cy, _ := os.ReadFile(filepath.Join(dir, "collector.yaml"))
	for _, want := range []string{"job_name: gym-vllm/pd\n", fmt.Sprintf("localhost:%d", gymschema.RouterMetricsPort), "gym_service: pd", "role: router"} {
		if !strings.Contains(string(cy), want) {
			t.Errorf("collector.yaml lacks %q", want)
		}
	}
	m, _ := os.ReadFile(filepath.Join(dir, "metrics.jsonl"))
	var routerLine string
	for _, l := range strings.Split(string(m), "\n") {
		if strings.Contains(l, `"vllm_router_pd_prefill_requests_total"`) {
			routerLine = l
			break
		}
	}
	if routerLine == "" {
		t.Fatalf("job %s: no vllm_router_* in %s/metrics.jsonl", jobID, dir)
	}
	for _, want := range []string{`"gym-vllm/pd"`, `{"key":"gym_service","value":{"stringValue":"pd"}}`, `{"key":"role","value":{"stringValue":"router"}}`, `"slurm_job_id","value":{"stringValue":"` + jobID + `"}`} {
		if !strings.Contains(routerLine, want) {
			t.Errorf("the router's series lack %s:\n%.2000s", want, routerLine)
		}
	}
	text, err := exec.Command(filepath.Join(root, "build", "gym-otel-spank"), "inspect", base+".run").CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v %s", err, text)
	}
	t.Logf("inspect:\n%s", text)
	for _, want := range []string{"routers (vllm-router)", "gym-vllm/pd: requests routed ", "prefill  http://", fmt.Sprintf("decode   http://decode-node:%d", api+2)} {
		if !strings.Contains(string(text), want) {
			t.Errorf("inspect lacks %q", want)
		}
	}
	waitIdle(t)
}
