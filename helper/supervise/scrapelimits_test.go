package supervise_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
)

// Pages of the hostile targets (hostilePages).
const (
	hugeBodyBytes  = 200 << 20 // the body-size target's page
	manySamples    = 200000    // the sample-count target's samples
	tooManyLabels  = 100       // labels of the label-limit target's series
	defaultMemMiB  = 512       // memory_limit_mib's default: the collector's bound
	hostileServing = "SERVING"
)

// TestScrapeLimitsHostileTargets: another local user (nobody) listens on
// the ports a job scrapes (the model service's, dcgm's and node_exporter's)
// and serves a 200 MiB page, a page of 200,000 samples, and a series with
// 100 labels. The real collector scrapes them for several intervals: its
// peak resident memory stays under the collector's memory limit (512 MiB),
// every scrape of them fails (up = 0), and inspect names the limit each hit.
func TestScrapeLimitsHostileTargets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the hostile targets run as another user")
	}
	body, samples, labels := harness.FreePort(t), harness.FreePort(t), harness.FreePort(t)
	startHostilePages(t, body, samples, labels)
	s := harness.StartSup(t, harness.Job{JobID: "5151", VLLMPort: body, NodePort: samples, DCGMPort: labels, Scrape: 5}).MustReady(t)
	pid := s.Report.CollectorPID
	// Six failed scrapes of each target (about 30 s).
	var out string
	harness.WaitFor(t, 90*time.Second, "six scrapes of each hostile target in metrics.jsonl", func() bool {
		d, err := otlptest.Read(filepath.Join(s.Out, "metrics.jsonl"))
		if err != nil {
			return false
		}
		n := map[string]int{}
		for _, m := range d.Named("up") {
			name, _ := m.Resource.Str("service.name.override")
			if m.Gauge != nil {
				n[name] += len(m.Gauge.DataPoints)
			}
		}
		return n["gym-vllm/policy"] >= 6 && n["node"] >= 6 && n["dcgm"] >= 6
	})
	hwm := harness.ProcStatus(t, pid, "VmHWM")
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Logf("the drain: %v\n%s", err, s.Output())
	}
	kib, err := strconv.Atoi(strings.Fields(hwm)[0])
	if err != nil {
		t.Fatalf("VmHWM %q", hwm)
	}
	t.Logf("collector peak resident memory after the hostile scrapes: %d MiB (bound %d MiB)", kib>>10, defaultMemMiB)
	if kib>>10 >= defaultMemMiB {
		t.Errorf("the collector's peak resident memory %d MiB reached its memory limit %d MiB", kib>>10, defaultMemMiB)
	}
	cmd := exec.Command(harness.CLI(t), "inspect", s.Out)
	b, _ := cmd.CombinedOutput()
	out = string(b)
	t.Logf("inspect:\n%s", out)
	if log, err := os.ReadFile(filepath.Join(s.Out, "collector.log")); err == nil {
		seen := map[string]bool{}
		for _, l := range strings.Split(string(log), "\n") {
			if _, e, ok := strings.Cut(l, `"error": "`); ok && strings.Contains(l, "Failed to scrape") && !seen[e[:min(len(e), 12)]] {
				seen[e[:min(len(e), 12)]] = true
				t.Logf("collector.log: ... error: %.200s", e)
			}
		}
	}
	for _, want := range []string{
		"target gym-vllm/policy", "LIMIT: body_size_limit exceeded in",
		"LIMIT: sample_limit 50000 exceeded in", fmt.Sprintf("(up to %d samples)", manySamples),
		"page(s) refused while parsing (a label limit or a malformed page)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
	d, err := otlptest.Read(filepath.Join(s.Out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"huge_0", "many_0", "labelled"} {
		if len(d.Named(name)) > 0 {
			t.Errorf("a sample of a page over a limit (%s) reached metrics.jsonl", name)
		}
	}
}

// startHostilePages runs TestHostilePagesChild as nobody, serving the three
// pages on the given ports, and waits until it serves.
func startHostilePages(t *testing.T, body, samples, labels int) {
	t.Helper()
	dir := harness.SharedDir(t)
	cp := supervise.CopyTestBinary(t, dir)
	cmd := exec.Command(cp, "-test.run=^TestHostilePagesChild$", "-test.timeout=0")
	cmd.Env = []string{fmt.Sprintf("GOS_HOSTILE_PORTS=%d,%d,%d", body, samples, labels)}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Setpgid: true}
	cmd.Stderr = os.Stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	sc := bufio.NewScanner(pipe)
	if !sc.Scan() || sc.Text() != hostileServing {
		t.Fatalf("the hostile pages did not start: %q %v", sc.Text(), sc.Err())
	}
	go func() {
		for sc.Scan() {
		}
	}()
}

// TestHostilePagesChild serves the hostile pages (skipped unless started
// by startHostilePages).
func TestHostilePagesChild(t *testing.T) {
	ports := strings.Split(os.Getenv("GOS_HOSTILE_PORTS"), ",")
	if len(ports) != 3 {
		t.Skip("the child of TestScrapeLimitsHostileTargets")
	}
	pages := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) { // 200 MiB of samples, written as read
			bw := bufio.NewWriterSize(w, 1<<16)
			for n, i := 0, 0; n < hugeBodyBytes; i++ {
				k, err := fmt.Fprintf(bw, "huge_%d{pad=\"%s\"} %d\n", i, strings.Repeat("x", 64), i)
				if err != nil {
					return
				}
				n += k
			}
			bw.Flush()
		},
		func(w http.ResponseWriter) {
			bw := bufio.NewWriterSize(w, 1<<16)
			for i := 0; i < manySamples; i++ {
				fmt.Fprintf(bw, "many_%d 1\n", i)
			}
			bw.Flush()
		},
		func(w http.ResponseWriter) {
			var ls []string
			for i := 0; i < tooManyLabels; i++ {
				ls = append(ls, fmt.Sprintf("l%d=\"v\"", i))
			}
			fmt.Fprintf(w, "ok_metric 1\nlabelled{%s} 1\n", strings.Join(ls, ","))
		},
	}
	for i, p := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			fmt.Printf("listen %s: %v\n", p, err)
			return
		}
		page := pages[i]
		go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			page(w)
		}))
	}
	fmt.Println(hostileServing)
	select {}
}
