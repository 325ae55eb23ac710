package plugin_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// lensKeys are Lens' identity keys the collector stamps (helper/render,
// lens.go) and every task's OTEL_RESOURCE_ATTRIBUTES gets.
var lensKeys = []string{
	render.LensJobID, render.LensJobIDRaw, render.LensArrayJobID, render.LensArrayTaskID,
	render.LensRestartCount, render.LensSLUID, render.LensClusterName, render.LensHeadNode,
	render.LensJobUser, render.LensJobUUID, render.LensRunUUID,
}

// parseResAttrs reads an OTEL_RESOURCE_ATTRIBUTES value as the SDKs do
// (keys trimmed, values percent-decoded); dup lists the keys seen twice.
func parseResAttrs(t *testing.T, v string) (m map[string]string, dup []string) {
	t.Helper()
	m = map[string]string{}
	for _, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(item, "=")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		dec, err := url.PathUnescape(strings.TrimSpace(val))
		if err != nil {
			t.Errorf("OTEL_RESOURCE_ATTRIBUTES %q: %s: %v", v, k, err)
		}
		if _, seen := m[k]; seen {
			dup = append(dup, k)
		}
		m[k] = dec
	}
	return m, dup
}

// outLine is the rest of the line of out that starts with prefix, and
// whether there is one.
func outLine(out, prefix string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimPrefix(l, prefix), true
		}
	}
	return "", false
}

// TestLensTaskIdentity: every task of a two-node job gets Lens' identity
// in OTEL_RESOURCE_ATTRIBUTES (and LENS_SLURM_SLUID where Slurm gives a
// SLUID) with the values the collector stamps on the data it scrapes (the
// cgroup readings of each node): the batch script, a step on both nodes, and
// a step launched with the user's own OTEL_RESOURCE_ATTRIBUTES, whose
// segments stay (its slurm.job.user among them, once) with only the
// missing keys appended. A Gym stand-in on the second node (Lens' rule:
// inherited values win) carries the same nv.dl.job.uuid on its spans.
func TestLensTaskIdentity(t *testing.T) {
	waitIdle(t)
	gym := testenv.Standin(t, "gym-standin")
	if out, err := run("install", "-m", "0755", gym, filepath.Join(plugDir, "gym-standin")); err != nil {
		t.Fatalf("install %s: %v %s", gym, err, out)
	}
	const userAttrs = "slurm.job.user=some%20one, team=a%2Cb"
	d := markerDir(t, "lensenv")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
echo "batch ORA=$OTEL_RESOURCE_ATTRIBUTES"
echo "batch LSS=${LENS_SLURM_SLUID-unset}"
srun -N2 -n2 bash -c 'echo "step $SLURMD_NODENAME ORA=$OTEL_RESOURCE_ATTRIBUTES"'
OTEL_RESOURCE_ATTRIBUTES='%[2]s' srun -N1 -n1 -w gn2 bash -c 'echo "user ORA=$OTEL_RESOURCE_ATTRIBUTES"'
srun -N1 -n1 -w gn2 %[1]s/gym-standin --names gym --server lensgym --rollouts 1 || exit 9
sleep 4 # the cgroup readings (every 1 s, the first at the collector's readiness) on both nodes
`, plugDir, userAttrs))
	r := asUser(t, 150*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait -N2 -w gn1,gn2 --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	raw, _ := os.ReadFile(d + "/job.out")
	out := string(raw)
	if r.code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	job := jobIDOf(t, r)
	waitNoCollector(t)
	dirs := map[string]string{"gn1": filepath.Join(d, "run", "otel"), "gn2": filepath.Join(d, "run", "otel", "nodes", "gn2")}

	// The collector's stamp on scraped data, on each node: the cgroup
	// scrape's resources (no producer sets Lens' keys there).
	stamp := map[string]map[string]string{}
	for node, dir := range dirs {
		for _, m := range otlptest.MustRead(t, dir, "metrics").Metrics {
			if v, _ := m.Resource.Str("service.name.override"); v == "cgroup" {
				stamp[node] = m.Resource.Text()
				break
			}
		}
		if stamp[node] == nil {
			t.Fatalf("%s: no cgroup reading in %s", node, dir)
		}
	}
	want := map[string]string{}
	for _, k := range lensKeys {
		if v, ok := stamp["gn1"][k]; ok {
			want[k] = v
		}
		if stamp["gn1"][k] != stamp["gn2"][k] {
			t.Errorf("%s: the collectors stamp %q on gn1, %q on gn2", k, stamp["gn1"][k], stamp["gn2"][k])
		}
	}
	for _, k := range []string{render.LensJobUUID, render.LensJobIDRaw, render.LensHeadNode, render.LensJobUser} {
		if want[k] == "" {
			t.Fatalf("the collector stamps no %s on scraped data: %v", k, stamp["gn1"])
		}
	}
	if want[render.LensJobIDRaw] != job || want[render.LensHeadNode] != "gn1" {
		t.Errorf("stamped %s=%q %s=%q, want %s and gn1", render.LensJobIDRaw, want[render.LensJobIDRaw], render.LensHeadNode, want[render.LensHeadNode], job)
	}

	check := func(who string, user map[string]string) {
		v, ok := outLine(out, who+" ORA=")
		if !ok {
			t.Errorf("%s: no OTEL_RESOURCE_ATTRIBUTES line in the job's output:\n%s", who, out)
			return
		}
		got, dup := parseResAttrs(t, v)
		if len(dup) > 0 {
			t.Errorf("%s: keys given twice %v in %q", who, dup, v)
		}
		for k, w := range want {
			if u, mine := user[k]; mine {
				w = u
			}
			if got[k] != w {
				t.Errorf("%s: %s=%q, want %q (OTEL_RESOURCE_ATTRIBUTES=%q)", who, k, got[k], w, v)
			}
		}
		for k, u := range user {
			if got[k] != u {
				t.Errorf("%s: the user's %s=%q became %q", who, k, u, got[k])
			}
		}
	}
	check("batch", nil)
	check("step gn1", nil)
	check("step gn2", nil)
	check("user", map[string]string{render.LensJobUser: "some one", "team": "a,b"})
	if v, _ := outLine(out, "user ORA="); !strings.HasPrefix(v, userAttrs+",") {
		t.Errorf("the user's value is not kept as written, ahead of the appended keys: %q", v)
	}
	sluid, _ := outLine(out, "batch LSS=")
	if w, ok := want[render.LensSLUID]; ok && sluid != w || !ok && sluid != "unset" {
		t.Errorf("LENS_SLURM_SLUID=%q, the collector stamps slurm.sluid=%q (present: %v)", sluid, w, ok)
	}

	// The Gym stand-in's spans on gn2: the job's one join key.
	var gymUUID string
	for _, s := range otlptest.MustRead(t, dirs["gn2"], "traces").Spans {
		if s.Name == "gym.rollout" {
			gymUUID, _ = s.Resource.Str(render.LensJobUUID)
			break
		}
	}
	if gymUUID != want[render.LensJobUUID] {
		t.Errorf("the Gym stand-in's %s=%q, the collector's %q", render.LensJobUUID, gymUUID, want[render.LensJobUUID])
	}
	batch, _ := outLine(out, "batch ORA=")
	t.Logf("job %s: batch OTEL_RESOURCE_ATTRIBUTES=%s; LENS_SLURM_SLUID=%s; Gym's %s=%s", job, batch, sluid, render.LensJobUUID, gymUUID)
	waitIdle(t)
}

// TestLensArrayOneUUID: in each element of an array job, the Gym
// stand-in (Lens' rule: the launch's values win over what it would derive
// from SLURM_ARRAY_*) carries the nv.dl.job.uuid and slurm.job.id the
// collector stamps on the element's scraped data: one join key for every
// producer of the element.
func TestLensArrayOneUUID(t *testing.T) {
	waitIdle(t)
	gym := testenv.Standin(t, "gym-standin")
	if out, err := run("install", "-m", "0755", gym, filepath.Join(plugDir, "gym-standin")); err != nil {
		t.Fatalf("install %s: %v %s", gym, err, out)
	}
	d := markerDir(t, "lensarray")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
%[1]s/gym-standin --names gym --server arraygym --rollouts 1 || exit 9
sleep 3 # the cgroup readings
`, plugDir))
	r := asUser(t, 150*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait --array=0-1 -w gn1 --gym-otel=job_dir=%s/run-%%j -o %s/job-%%a.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	waitNoCollector(t)
	dirs, _ := filepath.Glob(filepath.Join(d, "run-*", "otel"))
	if len(dirs) != 2 {
		t.Fatalf("element dirs %v, want 2", dirs)
	}
	for _, dir := range dirs {
		var stamp map[string]string
		for _, m := range otlptest.MustRead(t, dir, "metrics").Metrics {
			if v, _ := m.Resource.Str("service.name.override"); v == "cgroup" {
				stamp = m.Resource.Text()
				break
			}
		}
		if stamp == nil {
			t.Fatalf("%s: no cgroup reading", dir)
		}
		var gymRes map[string]string
		for _, s := range otlptest.MustRead(t, dir, "traces").Spans {
			if s.Name == "gym.rollout" {
				gymRes = s.Resource.Text()
				break
			}
		}
		if gymRes == nil {
			t.Fatalf("%s: no rollout of the Gym stand-in", dir)
		}
		for _, k := range []string{render.LensJobUUID, render.LensJobID, render.LensRunUUID} {
			if stamp[k] == "" || gymRes[k] != stamp[k] {
				t.Errorf("%s: %s: the Gym stand-in's %q, the collector's %q", dir, k, gymRes[k], stamp[k])
			}
		}
		t.Logf("%s: %s=%s %s=%s on both", filepath.Base(filepath.Dir(dir)), render.LensJobID, stamp[render.LensJobID], render.LensJobUUID, stamp[render.LensJobUUID])
	}
	waitIdle(t)
}
