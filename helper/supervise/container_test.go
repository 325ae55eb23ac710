package supervise_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestContainerRuntimeTemplate runs the collector through otel.container and
// a container_runtime template, with bubblewrap as the runtime (it needs no
// registry): the image is a root filesystem directory holding the collector.
// enroot, apptainer and podman take the same placeholders; they are not
// installed here.
func TestContainerRuntimeTemplate(t *testing.T) {
	bin := testenv.Collector(t)
	bwrap := testenv.Binary(t, "bwrap", "/usr/bin/bwrap")
	cli := containerTestCLI(t)
	image := t.TempDir()
	if err := os.Link(bin, filepath.Join(image, "otelcol-gym")); err != nil {
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(image, "otelcol-gym"), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"tmp", "proc", "dev"} {
		if err := os.Mkdir(filepath.Join(image, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "job")
	runtime := bwrap + " --ro-bind {image} / --tmpfs /tmp --bind {output} {output} --proc /proc --dev /dev /otelcol-gym --config {config}"
	site := filepath.Join(t.TempDir(), "site.yaml")
	body := "otel:\n  endpoint: http://127.0.0.1:9\n  service_name: svc\n  gpu_metrics_port: null\n  node_metrics_port: null\n" +
		"  container: " + image + "\n  container_runtime: " + runtime + "\n  export_timeout_seconds: 1\n  shutdown_timeout_seconds: 8\n"
	if err := os.WriteFile(site, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, "supervise", "--site", site, "--job-id", "9", "--node", "c1", "--spec", "job_dir="+out)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "OTEL_TOKEN=t", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no report: %v\n%s", err, stderr.String())
	}
	var r launch.Readiness
	if err := json.Unmarshal([]byte(line), &r); err != nil || r.Status != launch.StatusReady {
		t.Fatalf("report %q: %v\n%s", line, err, stderr.String())
	}
	argv, _ := os.ReadFile("/proc/" + strconv.Itoa(r.CollectorPID) + "/cmdline")
	if !strings.HasPrefix(string(argv), bwrap) {
		t.Errorf("the collector process is %q, not the runtime", argv)
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("drain through the runtime: %v\n%s", err, stderr.String())
	}
	t.Logf("drained through bwrap in %v", time.Since(start))
	data, err := os.ReadFile(filepath.Join(out, "otel", "state.json"))
	if err != nil || !strings.Contains(string(data), `"status": "drained"`) {
		t.Fatalf("state.json: %s %v", data, err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(r.CollectorPID)); err == nil {
		if st, _ := os.ReadFile("/proc/" + strconv.Itoa(r.CollectorPID) + "/stat"); !strings.Contains(string(st), ") Z") {
			t.Errorf("the runtime process %d is still alive", r.CollectorPID)
		}
	}
}

// containerTestCLI builds gym-otel-spank for this test.
func containerTestCLI(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gym-otel-spank")
	out, err := exec.Command("go", "build", "-o", p, filepath.Join(testenv.Root(), "cmd", "gym-otel-spank")).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return p
}
