package lifecycle_test

// The harness of the tests with real parts: it builds the real CLI once,
// starts the real collector (through `gym-otel-spank supervise`), Debian's
// node_exporter, the stand-ins and a backend collector with bearer-token
// auth, and cleans every process up.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/lifecycle"
	hproc "github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// cliPath is the gym-otel-spank binary TestMain builds; "" when the build
// failed (buildErr says why).
var (
	cliPath  string
	buildErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gym-otel-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// 0755: the supervisor may be started as root and become another user.
	os.Chmod(dir, 0o755)
	cliPath = filepath.Join(dir, "gym-otel-spank")
	cmd := exec.Command("go", "build", "-o", cliPath, "./cmd/gym-otel-spank")
	cmd.Dir = testenv.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		buildErr = fmt.Errorf("go build ./cmd/gym-otel-spank: %v\n%s", err, out)
		cliPath = ""
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cli returns the built CLI or fails the test.
func cli(t testing.TB) string {
	t.Helper()
	if cliPath == "" {
		t.Fatal(buildErr)
	}
	return cliPath
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// sharedDir makes a directory that any user may traverse and read (0755),
// removed at the end of the test: t.TempDir is 0700 under a 0700 parent,
// which a supervisor that became another user cannot read.
func sharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gym-otel-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// syncBuffer is a bytes.Buffer safe for a writing process and a reading test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a background process of a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// startProc starts argv in its own process group with output captured; the
// group is killed at the end of the test.
func startProc(t testing.TB, name string, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill SIGTERMs the process group, then SIGKILLs it after 5 s.
func (p *proc) kill() {
	if !p.running() {
		return
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// patience is the least time a test waits for a condition or an exit
// before it fails: on a loaded machine every step is slower, and a test
// may be slow but never flaky. The durations the tests pass are what the
// step needs on an idle machine; a bound that is a property of the
// product is asserted on its own, from what was measured.
const patience = 2 * time.Minute

// wait waits for the process to exit within d (at least patience).
func (p *proc) wait(t testing.TB, d time.Duration) error {
	t.Helper()
	d = max(d, patience)
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v; output:\n%s", p.name, d, p.out.String())
		return nil
	}
}

// waitFor polls cond every 50 ms until it holds or d (at least patience)
// passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = max(d, patience)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// httpOK reports whether GET url answers 200.
func httpOK(url string) bool {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startVLLM starts the vLLM stand-in and returns its port.
func startVLLM(t testing.TB) int {
	port := freePort(t)
	startProc(t, "vllm-standin", nil, testenv.Standin(t, "vllm-standin"), "--port", strconv.Itoa(port), "--model", "standin-model")
	waitFor(t, 10*time.Second, "vllm-standin", func() bool { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/health", port)) })
	return port
}

// startDCGM starts the dcgm-exporter stand-in with GPUs 0,1 and returns its port.
func startDCGM(t testing.TB) int {
	port := freePort(t)
	startProc(t, "dcgm-standin", nil, testenv.Standin(t, "dcgm-standin"), "--port", strconv.Itoa(port), "--gpus", "0,1")
	waitFor(t, 10*time.Second, "dcgm-standin", func() bool { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)) })
	return port
}

// startNodeExporter starts Debian's node_exporter with a few cheap
// collectors and returns its port.
func startNodeExporter(t testing.TB) int {
	bin := testenv.Binary(t, "prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")
	port := freePort(t)
	startProc(t, "node_exporter", nil, bin,
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		"--collector.disable-defaults", "--collector.cpu", "--collector.meminfo", "--collector.loadavg")
	waitFor(t, 10*time.Second, "node_exporter", func() bool { return httpOK(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)) })
	return port
}

// startBlackhole starts the misbehaving backend (mode hang, 401, 429, 503
// or slow, with its flags in args) and returns its endpoint URL.
func startBlackhole(t testing.TB, mode string, args ...string) string {
	port := freePort(t)
	startProc(t, "blackhole", nil, append([]string{testenv.Standin(t, "blackhole"), "--port", strconv.Itoa(port), "--mode", mode}, args...)...)
	waitFor(t, 10*time.Second, "blackhole", func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// backend is a second real collector: OTLP/HTTP with bearertokenauth,
// writing what it accepts to jsonl files.
type backend struct {
	url string
	dir string
	p   *proc
}

// startBackend starts a backend that accepts exactly "Bearer <token>". The
// token is read from a file (bearertokenauth's filename option), so any
// byte sequence reaches the comparison unchanged: no YAML typing, no
// ${...} expansion on the backend's side.
func startBackend(t testing.TB, token string) *backend {
	t.Helper()
	// A free port may be taken by a parallel test before the backend
	// binds it: then again, on other ports.
	for try := 1; ; try++ {
		b, err := tryBackendOn(t, token, freePort(t))
		if err == nil {
			return b
		}
		if try < 3 && strings.Contains(err.Error(), "address already in use") {
			t.Logf("backend: a port was taken before it bound it; again on other ports")
			continue
		}
		t.Fatal(err)
	}
}

// startBackendOn is startBackend on a given OTLP/HTTP port.
func startBackendOn(t testing.TB, token string, port int) *backend {
	t.Helper()
	b, err := tryBackendOn(t, token, port)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tryBackendOn starts the backend on port; an error when it exited before
// its health check answered.
func tryBackendOn(t testing.TB, token string, port int) (*backend, error) {
	t.Helper()
	dir := sharedDir(t) // not t.TempDir: a subtest's name may hold "$"
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	health := freePort(t)
	cfg := fmt.Sprintf(`extensions:
  bearertokenauth:
    filename: %q
  health_check:
    endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
        auth:
          authenticator: bearertokenauth
exporters:
  file/traces:
    path: %q
    flush_interval: 100ms
  file/metrics:
    path: %q
    flush_interval: 100ms
  file/logs:
    path: %q
    flush_interval: 100ms
service:
  extensions: [health_check, bearertokenauth]
  telemetry:
    metrics:
      level: none
  pipelines:
    traces: {receivers: [otlp], exporters: [file/traces]}
    metrics: {receivers: [otlp], exporters: [file/metrics]}
    logs: {receivers: [otlp], exporters: [file/logs]}
`, tokFile, health, port, filepath.Join(dir, "traces.jsonl"), filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "logs.jsonl"))
	cfgPath := filepath.Join(dir, "backend.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "backend", []string{"PATH=/usr/bin:/bin"}, testenv.Collector(t), "--config", cfgPath)
	var exited error
	waitFor(t, 20*time.Second, "the backend's health check", func() bool {
		if !p.running() {
			exited = fmt.Errorf("backend exited: %v\n%s", p.err, p.out.String())
			return true
		}
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/", health))
	})
	if exited != nil {
		return nil, exited
	}
	return &backend{url: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir, p: p}, nil
}

// stop drains the backend so its files are complete.
func (b *backend) stop(t testing.TB) {
	t.Helper()
	syscall.Kill(b.p.cmd.Process.Pid, syscall.SIGTERM)
	b.p.wait(t, 10*time.Second)
}

// job describes one supervisor run: the site file, the job's Gym config and
// the supervise flags.
type job struct {
	JobID, Node string
	Endpoint    string // default: a port nothing listens on
	Binary      string // default: the real collector
	Token       string // the backend token (OTEL_TOKEN)
	ServiceName string // default my-eval-svc
	VLLMPort    int    // 0: no model service
	DCGMPort    int    // 0: null
	NodePort    int    // 0: null
	Scrape      int    // scrape_interval_seconds, default 1
	Health      int    // health_check_timeout_seconds, default 20
	Shutdown    int    // shutdown_timeout_seconds, default 11 (2 s × 3 exporters + 5)
	Export      int    // export_timeout_seconds, default 2
	Memory      int    // memory_limit_mib, default 512
	Output      string // --output; default <shared dir>/out
	User        string // --user
	Record      string // --record
	Env         []string
	// Wrap starts the supervisor through argv prefix Wrap (e.g. python3
	// setting a signal mask, then execv).
	Wrap []string
	// Args are more supervise flags (e.g. --gpus, --gpu-devices).
	Args []string
}

// sup is one running `gym-otel-spank supervise`.
type sup struct {
	*proc
	job     job
	dir     string // the job's shared dir
	out     string // output dir
	report  lifecycle.Readiness
	started time.Time
	// reportAfter is the time from start to the Report line.
	reportAfter time.Duration
}

const serviceName = "my-eval-svc"

// writeInputs writes the site file and the Gym config of j into dir.
func writeInputs(t testing.TB, dir string, j job) (site, gym string) {
	t.Helper()
	port := func(p int) string {
		if p == 0 {
			return "null"
		}
		return strconv.Itoa(p)
	}
	siteYAML := fmt.Sprintf(`otel:
  endpoint: %q
  service_name: %q
  token_env: OTEL_TOKEN
  binary: %q
  gpu_metrics_port: %s
  node_metrics_port: %s
  scrape_interval_seconds: %d
  health_check_timeout_seconds: %d
  shutdown_timeout_seconds: %d
  export_timeout_seconds: %d
  memory_limit_mib: %d
  gym_span_groups: all
`, j.Endpoint, j.ServiceName, j.Binary, port(j.DCGMPort), port(j.NodePort), j.Scrape, j.Health, j.Shutdown, j.Export, j.Memory)
	gymYAML := fmt.Sprintf("driver:\n  gym_install: /opt/gym\njob:\n  output_path: %s\n", filepath.Join(dir, "job"))
	if j.VLLMPort != 0 {
		gymYAML += fmt.Sprintf("services:\n  policy:\n    type: vllm\n    port: %d\n    served_model_name: standin-model\n    nodes: [0]\n", j.VLLMPort)
	}
	site, gym = filepath.Join(dir, "site.yaml"), filepath.Join(dir, "gym.yaml")
	for path, data := range map[string]string{site: siteYAML, gym: gymYAML} {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return site, gym
}

func (j *job) defaults(t testing.TB) {
	if j.JobID == "" {
		j.JobID = "4242"
	}
	if j.Node == "" {
		j.Node = "gn7"
	}
	if j.Endpoint == "" {
		j.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	}
	if j.Binary == "" {
		j.Binary = testenv.Collector(t)
	}
	if j.Token == "" {
		j.Token = "tok-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if j.ServiceName == "" {
		j.ServiceName = serviceName
	}
	if j.Scrape == 0 {
		j.Scrape = 1
	}
	if j.Health == 0 {
		j.Health = 20
	}
	if j.Shutdown == 0 {
		j.Shutdown = 11
	}
	if j.Export == 0 {
		j.Export = 2
	}
	if j.Memory == 0 {
		j.Memory = 512
	}
}

// currentUser is the user name the supervisor stamps when no --user is given.
func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Getuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Getuid())
}

// startSup starts the supervisor for j and waits for its Report line (at
// most 30 s). It does not check the status.
func startSup(t testing.TB, j job) *sup {
	t.Helper()
	j.defaults(t)
	dir := sharedDir(t)
	site, gym := writeInputs(t, dir, j)
	out := j.Output
	if out == "" {
		out = filepath.Join(dir, "out")
	}
	argv := append(append([]string{}, j.Wrap...), cli(t), "supervise",
		"--site", site, "--config", gym, "--job-id", j.JobID, "--node", j.Node, "--output", out)
	if j.User != "" {
		argv = append(argv, "--user", j.User)
	}
	if j.Record != "" {
		argv = append(argv, "--record", j.Record)
	}
	argv = append(argv, j.Args...)
	env := append([]string{"PATH=/usr/bin:/bin", "HOME=/root", "USER=" + currentUser(), "OTEL_TOKEN=" + j.Token}, j.Env...)
	s := &sup{job: j, dir: dir, out: out, started: time.Now()}
	pr, pw := io.Pipe()
	p := &proc{name: "supervise", out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = env
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = io.MultiWriter(pw, p.out), p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); pw.Close(); close(p.done) }()
	s.proc = p
	t.Cleanup(func() {
		p.kill()
		if s.report.CollectorPID != 0 {
			syscall.Kill(s.report.CollectorPID, syscall.SIGKILL)
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "{") {
				select {
				case lines <- sc.Text():
				default:
				}
			}
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		s.reportAfter = time.Since(s.started)
		if !ok {
			t.Fatalf("the supervisor exited without a report (%v); output:\n%s", p.err, p.out.String())
		}
		r, err := lifecycle.ReadReadiness([]byte(line))
		if err != nil {
			t.Fatalf("report %q: %v", line, err)
		}
		s.report = r
	case <-time.After(patience):
		t.Fatalf("no report within %v; output:\n%s", patience, p.out.String())
	}
	return s
}

// mustReady fails unless the report says ready.
func (s *sup) mustReady(t testing.TB) *sup {
	t.Helper()
	if s.report.Status != lifecycle.StatusReady {
		t.Fatalf("supervisor not ready: %+v\noutput:\n%s", s.report, s.out2())
	}
	return s
}

func (s *sup) out2() string { return s.proc.out.String() }

func (s *sup) healthURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/", s.report.Ports.Health)
}

// policy is the timing policy the supervisor of s computes from its
// otel: block (no node bounds): its health wait, the prolog's report wait
// and the epilog's drain wait among them.
func (s *sup) policy() timing.Policy {
	return timing.For(config.Otel{
		ScrapeIntervalSeconds:     s.job.Scrape,
		HealthCheckTimeoutSeconds: s.job.Health,
		ShutdownTimeoutSeconds:    s.job.Shutdown,
	}, timing.Bounds{})
}

// drain sends SIGTERM and waits (at most limit) for the supervisor to exit;
// it returns the time taken and the exit error.
func (s *sup) drain(t testing.TB, limit time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := s.wait(t, limit)
	return time.Since(start), err
}

// state reads state.json.
func (s *sup) state(t testing.TB) jobdir.State {
	t.Helper()
	st, err := jobdir.ReadState(s.out)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// gymEnv is the environment the plugin gives a task, pointing the Gym
// stand-in at the supervisor's collector with token tok (the receiver
// token when "").
func (s *sup) gymEnv(tok string) []string {
	if tok == "" {
		tok = s.report.ReceiverToken
	}
	env := []string{
		"PATH=/usr/bin:/bin",
		"NEMO_GYM_OTEL_ENABLED=1",
		"NEMO_GYM_OTEL_SPAN_GROUPS=all",
		"NEMO_GYM_OTEL_LOGS_ENABLED=1",
		"NEMO_GYM_OTEL_RUN_ID=" + s.job.JobID,
		fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", s.report.Ports.OTLPHTTP),
		fmt.Sprintf("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=http://127.0.0.1:%d", s.report.Ports.OTLPGRPC),
	}
	if tok != "-" {
		env = append(env, "OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20"+tok)
	}
	return env
}

// runGym runs the Gym stand-in against s to completion and returns its output.
func (s *sup) runGym(t testing.TB, server string, rollouts int, provider string) string {
	t.Helper()
	p := startProc(t, "gym-standin", s.gymEnv(""), testenv.Standin(t, "gym-standin"),
		"--server", server, "--rollouts", strconv.Itoa(rollouts), "--sandbox-provider", provider,
		"--rollout-duration", "10ms", "--flush-timeout", "10s")
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("gym-standin: %v\n%s", err, p.out.String())
	}
	if !strings.Contains(p.out.String(), "flush=ok") {
		t.Fatalf("gym-standin did not flush: %s", p.out.String())
	}
	return p.out.String()
}

// procAlive reports whether pid is alive and still the process that started
// at start ticks (0: any).
func procAlive(pid int, start uint64) bool {
	st, err := hproc.StartTime(pid)
	if err != nil {
		return false
	}
	if state := procState(pid); state == "Z" || state == "X" {
		return false
	}
	return start == 0 || st == start
}

// procState is the state letter of /proc/<pid>/stat.
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// sessionMembers lists the live processes of session sid.
func sessionMembers(sid int) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(data, ')')
		f := strings.Fields(string(data[i+1:]))
		// f[0] state, f[1] ppid, f[2] pgrp, f[3] session
		if len(f) > 3 && f[3] == strconv.Itoa(sid) && f[0] != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procsMatching lists live pids whose argv contains sub.
func procsMatching(sub string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if bytes.Contains(data, []byte(sub)) && procState(pid) != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStatus returns field key of /proc/<pid>/status.
func procStatus(t testing.TB, pid int, key string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, key)
	return ""
}

// assertGone fails if the collector of s or any process of its session is
// still alive.
func (s *sup) assertGone(t testing.TB) {
	t.Helper()
	if s.running() {
		t.Errorf("the supervisor is still running")
	}
	if pid := s.report.CollectorPID; pid != 0 {
		if procAlive(pid, s.report.CollectorStart) {
			t.Errorf("the collector (pid %d) is still running after the drain", pid)
		}
		if m := sessionMembers(pid); len(m) > 0 {
			t.Errorf("processes of the collector's session are left: %v", m)
		}
	}
}
