package supervise_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// TestContainerApptainer runs a job's collector through the default
// otel.container_runtime line (apptainer exec --cleanenv --no-eval ...)
// as gymuser, unprivileged, from a sandbox dir image. Apptainer (Debian
// sid's 1.4, which needs a newer C library than Debian 12's) runs inside
// the root file system GYM_OTEL_APPTAINER_ROOT (made with `debootstrap
// --variant=minbase --include=apptainer sid DIR`, holding a user gymuser
// of uid 2001 and the image at /img: a shell, the C library, /otelcol-gym),
// entered with bubblewrap; skipped without it. The three tokens must reach
// the collector through APPTAINERENV_<NAME> alone, byte for byte (a token
// with "$", "${env:HOME}", "$$", a back-quoted command and a quote, which
// Apptainer shell-evaluates without --no-eval), so that the backend takes
// the job's spans.
func TestContainerApptainer(t *testing.T) {
	root := os.Getenv("GYM_OTEL_APPTAINER_ROOT")
	if root == "" || os.Getuid() != 0 {
		t.Skip("needs root and GYM_OTEL_APPTAINER_ROOT, a root file system with Apptainer")
	}
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("no bwrap")
	}
	u := ensureGymUser(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := harness.SharedDir(t)
	jobDir := filepath.Join(dir, "job")
	if err := os.Mkdir(jobDir, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(jobDir, uid, gid)
	// bwrap enters the root file system (a chroot would forbid the user
	// namespace Apptainer makes) with /tmp, where the job dir is, bound.
	runtime := bwrap + " --bind " + root + " / --dev-bind /dev /dev --proc /proc --bind /sys /sys --tmpfs /run --bind /tmp /tmp " +
		config.DefaultContainerRuntime
	token := "ap$p{" + harness.RandHex(8) + "}${env:HOME}$$`id`'q"
	be := harness.StartBackend(t, token)
	start := time.Now()
	s := harness.StartSup(t, harness.Job{JobID: "4403", User: "gymuser", Token: token, Endpoint: be.URL,
		VLLMPort: harness.StartVLLM(t), Output: filepath.Join(jobDir, "otel"), Health: 60,
		Container: "/img", ContainerRuntime: runtime}).MustReady(t)
	t.Logf("ready through apptainer in %v", time.Since(start))
	var coll int
	for _, pid := range harness.ProcsMatching("/otelcol-gym\x00--config\x00" + filepath.Join(s.Out, jobdir.ConfigFile)) {
		if strings.HasPrefix(string(mustCmdline(pid)), "/otelcol-gym\x00") {
			coll = pid
		}
	}
	if coll == 0 {
		t.Fatal("no collector in the container")
	}
	env, _ := os.ReadFile("/proc/" + strconv.Itoa(coll) + "/environ")
	// Delivery from the files (the default): the supervisor sends to the
	// backend, the collector has no backend exporter and no backend
	// token; the receiver token reaches it through APPTAINERENV_ alone.
	if strings.Contains("\x00"+string(env), "\x00OTEL_TOKEN=") || strings.Contains(string(env), strings.ReplaceAll(token, "$", "$$")) {
		t.Errorf("the container's collector has the backend token in its environment with delivery from the files")
	}
	if !strings.Contains("\x00"+string(env), "\x00"+render.ReceiverTokenEnv+"="+s.ReceiverToken+"\x00") {
		t.Errorf("the container's collector has not the receiver token in %s", render.ReceiverTokenEnv)
	}
	harness.WaitMetricNames(t, s, 30*time.Second, "vllm_prompt_tokens_total")
	s.RunGym(t, "agent", 2, "local")
	harness.AssertNoLeak(t, token, s.Out, map[string]string{"the supervisor's output": s.Output()})
	took, err := s.Drain(t, 60*time.Second)
	if err != nil {
		t.Fatalf("drain through apptainer: %v\n%s", err, s.Output())
	}
	t.Logf("drained through apptainer in %v", took)
	s.AssertGone(t)
	if st := s.State(t); st.Status != jobdir.StatusDrained || st.ExportProblems != "" {
		t.Errorf("state.json: %+v; want drained without export problems", st)
	}
	be.Stop(t)
	if d := otlptest.MustRead(t, be.Dir, "traces"); d.SpanCount("gym.rollout") != 2 {
		t.Errorf("the backend got %d gym.rollout spans, want 2", d.SpanCount("gym.rollout"))
	}
}
