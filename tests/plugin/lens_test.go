package plugin_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// backendResources returns, for the backend's file of one signal, the
// resource attributes (string and int values as text) of every resource
// of job whose items include a span or metric named want.
func backendResources(t *testing.T, signal, job, want string) []map[string]string {
	t.Helper()
	// The last line may be partial while the backend writes.
	d, err := otlptest.ReadGrowing(filepath.Join(backendDir, signal+".jsonl"))
	if err != nil {
		return nil
	}
	var out []map[string]string
	for _, s := range d.Spans {
		if m := s.Resource.Text(); m["slurm_job_id"] == job && s.Name == want {
			out = append(out, m)
		}
	}
	for _, x := range d.Metrics {
		if m := x.Resource.Text(); m["slurm_job_id"] == job && x.Name == want {
			out = append(out, m)
		}
	}
	return out
}

// TestLensJoinKey: at the backend, the job's Gym spans (the stand-in with
// Gym's real names derives Lens' identity from its own Slurm environment,
// as Lens does) and its scraped vLLM metrics (stamped by the collector from
// the prolog's facts) carry the same Lens join key, nv.dl.job.uuid, and
// slurm.job.id, beside the seed's slurm_job_id.
func TestLensJoinKey(t *testing.T) {
	waitIdle(t)
	vllm := testenv.Standin(t, "vllm-standin")
	gym := testenv.Standin(t, "gym-standin")
	for _, p := range []string{vllm, gym} {
		if out, err := run("install", "-m", "0755", p, filepath.Join(plugDir, filepath.Base(p))); err != nil {
			t.Fatalf("install %s: %v %s", p, err, out)
		}
	}
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	base := filepath.Join(jobsDir, "lens-"+tag)
	port := shifted(18171) // not the e2e job's: a stand-in of one job may outlive it briefly
	gymCfg := base + ".gym.yaml"
	if err := os.WriteFile(gymCfg, []byte(`compute:
  gymtest: {type: slurm, account: a}
driver:
  gym_install: {ref: v0.3.0}
job:
  output_path: `+base+`.run
services:
  policy:
    type: vllm
    container: c
    model: tiny-model
    port: `+port+`
`), 0o644); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, "lens-"+tag+".sh", fmt.Sprintf(`
%[2]s/vllm-standin --port %[3]s --model tiny-model &
sleep 2.5
%[2]s/gym-standin --names gym --rollouts 3 || exit 9
`, base, plugDir, port))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait --gym-otel=config=%s,benchmark=bench1 -o %s.out %s", gymCfg, base, script))
	if r.code != 0 {
		out, _ := os.ReadFile(base + ".out")
		t.Fatalf("exit %d; stderr %s\n%s", r.code, r.stderr, out)
	}
	job := jobIDOf(t, r)
	var spans, scrapes []map[string]string
	deadline := time.Now().Add(60 * time.Second)
	for {
		spans = backendResources(t, "traces", job, "gym.rollout")
		scrapes = backendResources(t, "metrics", job, "vllm_num_requests_running")
		if len(spans) > 0 && len(scrapes) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(spans) == 0 || len(scrapes) == 0 {
		t.Fatalf("backend: %d gym.rollout span resources, %d vLLM metric resources of job %s", len(spans), len(scrapes), job)
	}
	want := render.LensUUID("nemo.lens.job/" + clusterName() + "/" + job)
	for what, rs := range map[string][]map[string]string{"gym span": spans, "vllm metric": scrapes} {
		for _, m := range rs {
			if m[render.LensJobUUID] != want || m[render.LensJobID] != job || m[render.LensClusterName] != clusterName() || m["slurm_job_id"] != job {
				t.Errorf("%s resource: nv.dl.job.uuid %q slurm.job.id %q slurm.cluster.name %q slurm_job_id %q; want %s, %s, %s",
					what, m[render.LensJobUUID], m[render.LensJobID], m[render.LensClusterName], m["slurm_job_id"], want, job, clusterName())
				break
			}
		}
	}
	if s := spans[0]; s["nemo.gym.server.name"] != "agent" || !strings.HasPrefix(s["service.name.override"], "nemo-gym/") {
		t.Errorf("the Gym span resource lacks Gym's own attributes: %v", s)
	}
	waitNoCollector(t)
	waitIdle(t)
}
