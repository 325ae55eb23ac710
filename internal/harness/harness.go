// Package harness is the kit of the Go tests with real parts: it builds the
// real CLI once (Main), starts the real collector through `gym-otel-spank
// supervise` (StartSup), Debian's node_exporter, the stand-ins and a
// backend collector with bearer-token auth (StartBackend), and cleans every
// process up. Every package's tests may use it; production code does not
// import it.
package harness

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	hproc "github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// cliPath is the gym-otel-spank binary Main builds; "" when the build
// failed (buildErr says why).
var (
	cliPath  string
	buildErr error
)

// Main builds the real CLI (./cmd/gym-otel-spank) into a temporary dir,
// runs the tests of m and removes the dir; it returns m's exit code. A
// package whose tests use the harness calls it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
func Main(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gym-otel-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
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
	return code
}

// CLI returns the CLI Main built or fails the test.
func CLI(t testing.TB) string {
	t.Helper()
	if cliPath == "" {
		if buildErr == nil {
			t.Fatal("the CLI was not built: the package's TestMain must call harness.Main")
		}
		t.Fatal(buildErr)
	}
	return cliPath
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// SharedDir makes a directory that any user may traverse and read (0755),
// removed at the end of the test: t.TempDir is 0700 under a 0700 parent,
// which a supervisor that became another user cannot read.
func SharedDir(t testing.TB) string {
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

// SyncBuffer is a bytes.Buffer safe for a writing process and a reading test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Proc is a background process of a test.
type Proc struct {
	// Name names the process in failures.
	Name string
	// Cmd is the started command.
	Cmd *exec.Cmd
	// Out holds its stdout and stderr.
	Out *SyncBuffer
	// Done is closed when it has exited; Err is then its exit error.
	Done chan struct{}
	Err  error
}

// StartProc starts argv in its own process group with output captured; the
// group is killed at the end of the test.
func StartProc(t testing.TB, name string, env []string, argv ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Out: &SyncBuffer{}, Done: make(chan struct{})}
	p.Cmd = exec.Command(argv[0], argv[1:]...)
	p.Cmd.Env = env
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() { p.Err = p.Cmd.Wait(); close(p.Done) }()
	t.Cleanup(func() { p.Kill() })
	return p
}

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.Done:
		return false
	default:
		return true
	}
}

// Kill SIGTERMs the process group, then SIGKILLs it after 5 s.
func (p *Proc) Kill() {
	if !p.Running() {
		return
	}
	syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.Done
	}
}

// Patience is the least time a test waits for a condition or an exit
// before it fails: on a loaded machine every step is slower, and a test
// may be slow but never flaky. The durations the tests pass are what the
// step needs on an idle machine; a bound that is a property of the
// product is asserted on its own, from what was measured.
const Patience = 2 * time.Minute

// Wait waits for the process to exit within d (at least patience).
func (p *Proc) Wait(t testing.TB, d time.Duration) error {
	t.Helper()
	d = max(d, Patience)
	select {
	case <-p.Done:
		return p.Err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v; output:\n%s", p.Name, d, p.Out.String())
		return nil
	}
}

// WaitFor polls cond every 50 ms until it holds or d (at least patience)
// passes.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = max(d, Patience)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// HTTPOK reports whether GET url answers 200.
func HTTPOK(url string) bool {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// StartVLLM starts the vLLM stand-in and returns its port.
func StartVLLM(t testing.TB) int {
	port := FreePort(t)
	StartProc(t, "vllm-standin", nil, testenv.Standin(t, "vllm-standin"), "--port", strconv.Itoa(port), "--model", "standin-model")
	WaitFor(t, 10*time.Second, "vllm-standin", func() bool { return HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/health", port)) })
	return port
}

// StartDCGM starts the dcgm-exporter stand-in with GPUs 0,1 and returns its port.
func StartDCGM(t testing.TB) int {
	port := FreePort(t)
	StartProc(t, "dcgm-standin", nil, testenv.Standin(t, "dcgm-standin"), "--port", strconv.Itoa(port), "--gpus", "0,1")
	WaitFor(t, 10*time.Second, "dcgm-standin", func() bool { return HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)) })
	return port
}

// StartNodeExporter starts Debian's node_exporter with a few cheap
// collectors and returns its port.
func StartNodeExporter(t testing.TB) int {
	bin := testenv.Binary(t, "prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")
	port := FreePort(t)
	StartProc(t, "node_exporter", nil, bin,
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port),
		"--collector.disable-defaults", "--collector.cpu", "--collector.meminfo", "--collector.loadavg")
	WaitFor(t, 10*time.Second, "node_exporter", func() bool { return HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)) })
	return port
}

// StartBlackhole starts the misbehaving backend (mode hang, 401, 429, 503
// or slow, with its flags in args) and returns its endpoint URL.
func StartBlackhole(t testing.TB, mode string, args ...string) string {
	url, _ := StartBlackholeProc(t, mode, args...)
	return url
}

// StartBlackholeProc is StartBlackhole, also returning its process (to
// stop it before the test's end: the backend's return on the same port).
func StartBlackholeProc(t testing.TB, mode string, args ...string) (string, *Proc) {
	port := FreePort(t)
	p := StartProc(t, "blackhole", nil, append([]string{testenv.Standin(t, "blackhole"), "--port", strconv.Itoa(port), "--mode", mode}, args...)...)
	WaitFor(t, 10*time.Second, "blackhole", func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return fmt.Sprintf("http://127.0.0.1:%d", port), p
}

// Backend is a second real collector: OTLP/HTTP with bearertokenauth,
// writing what it accepts to jsonl files.
type Backend struct {
	// URL is its OTLP/HTTP endpoint, http://127.0.0.1:<port>.
	URL string
	// Dir holds traces.jsonl, metrics.jsonl and logs.jsonl.
	Dir string
	// P is the backend collector's process.
	P *Proc
}

// StartBackend starts a backend that accepts exactly "Bearer <token>". The
// token is read from a file (bearertokenauth's filename option), so any
// byte sequence reaches the comparison unchanged: no YAML typing, no
// ${...} expansion on the backend's side.
func StartBackend(t testing.TB, token string) *Backend {
	t.Helper()
	// A free port may be taken by a parallel test before the backend
	// binds it: then again, on other ports.
	for try := 1; ; try++ {
		b, err := tryBackendOn(t, token, FreePort(t))
		if err == nil {
			return b
		}
		if try < 3 && (strings.Contains(err.Error(), "address already in use") || errors.Is(err, errBackendStart)) {
			t.Logf("backend: %v; again on other ports", firstLine(err.Error()))
			continue
		}
		t.Fatal(err)
	}
}

// StartBackendOn is StartBackend on a given OTLP/HTTP port.
func StartBackendOn(t testing.TB, token string, port int) *Backend {
	t.Helper()
	b, err := tryBackendOn(t, token, port)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tryBackendOn starts the backend on port; an error when it exited before
// its health check answered.
func tryBackendOn(t testing.TB, token string, port int) (*Backend, error) {
	t.Helper()
	dir := SharedDir(t) // not t.TempDir: a subtest's name may hold "$"
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	health := FreePort(t)
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
	p := StartProc(t, "backend", []string{"PATH=/usr/bin:/bin"}, testenv.Collector(t), "--config", cfgPath)
	// A backend starts in about a second even on a busy host; one that
	// answers no health check in backendStart (its health port answered
	// by something else, or held) is ended and started again on other
	// ports, as one that could not bind.
	deadline := time.Now().Add(backendStart)
	for !HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/", health)) {
		if !p.Running() {
			return nil, fmt.Errorf("backend exited: %v\n%s", p.Err, p.Out.String())
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("%w: the backend answered no health check on port %d within %v\n%s", errBackendStart, health, backendStart, p.Out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &Backend{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Dir: dir, P: p}, nil
}

// backendStart bounds a backend's start, to its health check's answer.
const backendStart = 30 * time.Second

// errBackendStart: a backend did not start within backendStart.
var errBackendStart = errors.New("backend not started")

// Stop drains the backend so its files are complete.
func (b *Backend) Stop(t testing.TB) {
	t.Helper()
	syscall.Kill(b.P.Cmd.Process.Pid, syscall.SIGTERM)
	b.P.Wait(t, 10*time.Second)
}

// Job describes one supervisor run: the site file, the job's Gym config and
// the supervise flags.
type Job struct {
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
	Record      string // --record; with it, a control socket's listener at fd 4 (Sup.ControlPath), as the plugin's prolog hands one on
	Env         []string
	// Container and ContainerRuntime are otel.container and
	// otel.container_runtime ("": the host binary).
	Container, ContainerRuntime string
	// Wrap starts the supervisor through argv prefix Wrap (e.g. python3
	// setting a signal mask, then execv).
	Wrap []string
	// Args are more supervise flags (e.g. --gpus, --gpu-devices).
	Args []string
	// Site is more lines of the site file's otel: block, each indented
	// two spaces and ending in a newline (e.g. "  delivery: files\n").
	Site string
	// HostEnergy are RAPL zones handed to the supervisor as the plugin's
	// prolog hands them (host_power=rapl): their files at descriptors 5
	// on, named in launch.EnvHostEnergy.
	HostEnergy []launch.EnergyZone
	// Gate is the read end of a gate handed to the supervisor as the
	// plugin's prolog hands it (launch.EnvGateFD): after the readiness
	// pipe and the hold socket, before the zones. nil: none.
	Gate *os.File
	// OnStart, when not nil, is called with the supervisor's pid once it
	// is started, before its report is awaited.
	OnStart func(pid int)
	// CLI is the gym-otel-spank binary to start ("": the one Main built),
	// e.g. a tests' build with a tag of its own.
	CLI string
}

// Sup is one running `gym-otel-spank supervise`.
type Sup struct {
	*Proc
	Job    Job
	Dir    string // the job's shared dir
	Out    string // output dir
	Report launch.Readiness
	// ControlPath is the control socket the supervisor was handed the listener
	// of (with a Record), "" for none.
	ControlPath string
	Started     time.Time
	// ReportAfter is the time from start to the Report line.
	ReportAfter time.Duration
	// ReceiverToken is the receiver token handed to the supervisor in its
	// environment (launch.EnvReceiverToken), minted here as root's prolog
	// mints it: the token the job's tasks send.
	ReceiverToken string
}

// ServiceName is the otel: service_name of the site file a Job defaults to.
const ServiceName = "my-eval-svc"

// WriteInputs writes the site file and the Gym config of j into dir.
func WriteInputs(t testing.TB, dir string, j Job) (site, gym string) {
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
	if j.Container != "" {
		siteYAML += fmt.Sprintf("  container: %q\n  container_runtime: %q\n", j.Container, j.ContainerRuntime)
	}
	siteYAML += j.Site
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

// Defaults fills the fields of j left zero with their defaults.
func (j *Job) Defaults(t testing.TB) {
	if j.JobID == "" {
		j.JobID = "4242"
	}
	if j.Node == "" {
		j.Node = "gn7"
	}
	if j.Endpoint == "" {
		j.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	}
	if j.Binary == "" {
		j.Binary = testenv.Collector(t)
	}
	if j.Token == "" {
		j.Token = "tok-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if j.ServiceName == "" {
		j.ServiceName = ServiceName
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

// CurrentUser is the user name the supervisor stamps when no --user is given.
func CurrentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Getuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Getuid())
}

// StartSup starts the supervisor for j and waits for its Report line (at
// most 30 s). It does not check the status.
func StartSup(t testing.TB, j Job) *Sup {
	t.Helper()
	j.Defaults(t)
	dir := SharedDir(t)
	site, gym := WriteInputs(t, dir, j)
	out := j.Output
	if out == "" {
		out = filepath.Join(dir, "out")
	}
	cli := j.CLI
	if cli == "" {
		cli = CLI(t)
	}
	argv := append(append([]string{}, j.Wrap...), cli, "supervise",
		"--site", site, "--config", gym, "--job-id", j.JobID, "--node", j.Node, "--output", out)
	if j.User != "" {
		argv = append(argv, "--user", j.User)
	}
	if j.Record != "" {
		argv = append(argv, "--record", j.Record)
	}
	argv = append(argv, j.Args...)
	rtoken, err := launch.MintToken()
	if err != nil {
		t.Fatal(err)
	}
	env := append([]string{"PATH=/usr/bin:/bin", "HOME=/root", "USER=" + CurrentUser(), "OTEL_TOKEN=" + j.Token,
		launch.EnvReceiverToken + "=" + rtoken}, j.Env...)
	s := &Sup{Job: j, Dir: dir, Out: out, Started: time.Now(), ReceiverToken: rtoken}
	pr, pw := io.Pipe()
	p := &Proc{Name: "supervise", Out: &SyncBuffer{}, Done: make(chan struct{})}
	p.Cmd = exec.Command(argv[0], argv[1:]...)
	p.Cmd.Env = env
	p.Cmd.Dir = dir
	p.Cmd.Stdout, p.Cmd.Stderr = io.MultiWriter(pw, p.Out), p.Out
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if j.Record != "" {
		// As the plugin's prolog: the listener made here, handed on at
		// launch.ControlListenerFD, this process's copy closed.
		s.ControlPath = filepath.Join(dir, "hold.sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.ControlPath, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		f, err := ln.File()
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		p.Cmd.ExtraFiles = []*os.File{nil, f}
	}
	if j.Gate != nil {
		// As the plugin's prolog: after the readiness pipe and the hold
		// socket (closed here when none).
		for len(p.Cmd.ExtraFiles) < 2 {
			p.Cmd.ExtraFiles = append(p.Cmd.ExtraFiles, nil)
		}
		p.Cmd.Env = append(p.Cmd.Env, launch.EnvGateFD+"="+launch.FormatGateFD(launch.ReadinessFD+len(p.Cmd.ExtraFiles)))
		p.Cmd.ExtraFiles = append(p.Cmd.ExtraFiles, j.Gate)
	}
	if len(j.HostEnergy) > 0 {
		// As the plugin's prolog: after the readiness pipe, the hold
		// socket (closed here when none) and the gate, the zones read-only.
		for len(p.Cmd.ExtraFiles) < 2 {
			p.Cmd.ExtraFiles = append(p.Cmd.ExtraFiles, nil)
		}
		p.Cmd.Env = append(p.Cmd.Env, launch.EnvHostEnergy+"="+launch.FormatEnergyZones(j.HostEnergy, launch.ReadinessFD+len(p.Cmd.ExtraFiles)))
		for _, z := range j.HostEnergy {
			p.Cmd.ExtraFiles = append(p.Cmd.ExtraFiles, z.File)
		}
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if j.OnStart != nil {
		j.OnStart(p.Cmd.Process.Pid)
	}
	go func() { p.Err = p.Cmd.Wait(); pw.Close(); close(p.Done) }()
	s.Proc = p
	t.Cleanup(func() {
		p.Kill()
		if s.Report.CollectorPID != 0 {
			syscall.Kill(s.Report.CollectorPID, syscall.SIGKILL)
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
		s.ReportAfter = time.Since(s.Started)
		if !ok {
			t.Fatalf("the supervisor exited without a report (%v); output:\n%s", p.Err, p.Out.String())
		}
		r, err := launch.ReadReadiness([]byte(line))
		if err != nil {
			t.Fatalf("report %q: %v", line, err)
		}
		s.Report = r
	case <-time.After(Patience):
		t.Fatalf("no report within %v; output:\n%s", Patience, p.Out.String())
	}
	return s
}

// MustReady fails unless the report says ready.
func (s *Sup) MustReady(t testing.TB) *Sup {
	t.Helper()
	if s.Report.Status != launch.StatusReady {
		t.Fatalf("supervisor not ready: %+v\noutput:\n%s", s.Report, s.Output())
	}
	return s
}

// Output is what the supervisor wrote to stdout and stderr so far.
func (s *Sup) Output() string { return s.Proc.Out.String() }

// HealthURL is the collector's health check URL from the report.
func (s *Sup) HealthURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/", s.Report.Ports.Health)
}

// Policy is the timing policy the supervisor of s computes from its
// otel: block (no node bounds): its health wait, the prolog's report wait
// and the epilog's drain wait among them.
func (s *Sup) Policy() timing.Policy {
	return timing.For(config.Otel{
		ScrapeIntervalSeconds:     s.Job.Scrape,
		HealthCheckTimeoutSeconds: s.Job.Health,
		ShutdownTimeoutSeconds:    s.Job.Shutdown,
	}, timing.Bounds{})
}

// Drain sends SIGTERM and waits (at most limit) for the supervisor to exit;
// it returns the time taken and the exit error.
func (s *Sup) Drain(t testing.TB, limit time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := s.Wait(t, limit)
	return time.Since(start), err
}

// State reads state.json.
func (s *Sup) State(t testing.TB) jobdir.State {
	t.Helper()
	st, err := jobdir.ReadState(s.Out)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// GymEnv is the environment the plugin gives a task, pointing the Gym
// stand-in at the supervisor's collector with token tok (the receiver
// token when "").
func (s *Sup) GymEnv(tok string) []string {
	if tok == "" {
		tok = s.ReceiverToken
	}
	env := []string{
		"PATH=/usr/bin:/bin",
		"NEMO_GYM_OTEL_ENABLED=1",
		"NEMO_GYM_OTEL_SPAN_GROUPS=all",
		"NEMO_GYM_OTEL_LOGS_ENABLED=1",
		"NEMO_GYM_OTEL_RUN_ID=" + s.Job.JobID,
		fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:%d", s.Report.Ports.OTLPHTTP),
		fmt.Sprintf("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT=http://127.0.0.1:%d", s.Report.Ports.OTLPGRPC),
	}
	if tok != "-" {
		env = append(env, "OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20"+tok)
	}
	return env
}

// RunGym runs the Gym stand-in against s to completion and returns its output.
func (s *Sup) RunGym(t testing.TB, server string, rollouts int, provider string) string {
	t.Helper()
	p := StartProc(t, "gym-standin", s.GymEnv(""), testenv.Standin(t, "gym-standin"),
		"--server", server, "--rollouts", strconv.Itoa(rollouts), "--sandbox-provider", provider,
		"--rollout-duration", "10ms", "--flush-timeout", "10s")
	if err := p.Wait(t, 60*time.Second); err != nil {
		t.Fatalf("gym-standin: %v\n%s", err, p.Out.String())
	}
	if !strings.Contains(p.Out.String(), "flush=ok") {
		t.Fatalf("gym-standin did not flush: %s", p.Out.String())
	}
	return p.Out.String()
}

// ProcAlive reports whether pid is alive and still the process that started
// at start ticks (0: any).
func ProcAlive(pid int, start uint64) bool {
	st, err := hproc.StartTime(pid)
	if err != nil {
		return false
	}
	if state := ProcState(pid); state == "Z" || state == "X" {
		return false
	}
	return start == 0 || st == start
}

// ProcState is the state letter of /proc/<pid>/stat.
func ProcState(pid int) string {
	st, err := hproc.ReadStat(pid)
	if err != nil {
		return ""
	}
	return string(st.State)
}

// SessionMembers lists the live processes of session sid.
func SessionMembers(sid int) []int {
	return LiveProcesses(func(pid int) bool {
		st, err := hproc.ReadStat(pid)
		return err == nil && st.Session == sid
	})
}

// LiveProcesses lists the processes of /proc, zombies left out, for which
// keep is true.
func LiveProcesses(keep func(pid int) bool) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if keep(pid) && ProcState(pid) != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ProcsMatching lists live pids whose argv contains sub.
func ProcsMatching(sub string) []int {
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
		if bytes.Contains(data, []byte(sub)) && ProcState(pid) != "Z" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ProcStatus returns field key of /proc/<pid>/status.
func ProcStatus(t testing.TB, pid int, key string) string {
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

// AssertGone fails if the collector of s or any process of its session is
// still alive.
func (s *Sup) AssertGone(t testing.TB) {
	t.Helper()
	if s.Running() {
		t.Errorf("the supervisor is still running")
	}
	if pid := s.Report.CollectorPID; pid != 0 {
		if ProcAlive(pid, s.Report.CollectorStart) {
			t.Errorf("the collector (pid %d) is still running after the drain", pid)
		}
		if m := SessionMembers(pid); len(m) > 0 {
			t.Errorf("processes of the collector's session are left: %v", m)
		}
	}
}

// RandHex returns n random bytes in hex (2n characters).
func RandHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// WaitMetricNames waits until metrics.jsonl of s names every one of names.
func WaitMetricNames(t testing.TB, s *Sup, d time.Duration, names ...string) {
	t.Helper()
	WaitFor(t, d, fmt.Sprintf("metrics %v in metrics.jsonl", names), func() bool {
		data, _ := os.ReadFile(filepath.Join(s.Out, "metrics.jsonl"))
		for _, n := range names {
			if !bytes.Contains(data, []byte(`"name":"`+n+`"`)) {
				return false
			}
		}
		return true
	})
}

// AssertNoLeak fails if secret occurs in any file under dir, in out, or in
// the argv of any process.
func AssertNoLeak(t testing.TB, secret, dir string, extra map[string]string) {
	t.Helper()
	if len(secret) < 8 {
		t.Fatalf("secret %q too short to search for", secret)
	}
	files := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil // dirs, and the supervisor's token socket: no bytes to hold a token
		}
		files++
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("reading %s: %v", path, err)
			return nil
		}
		for _, form := range []string{secret, strings.ReplaceAll(secret, "$", "$$")} {
			if bytes.Contains(data, []byte(form)) {
				t.Errorf("the backend token appears in %s", path)
			}
		}
		return nil
	})
	if files < 5 {
		t.Errorf("only %d files under %s; expected collector.yaml, collector.log, state.json and the jsonl files", files, dir)
	}
	for what, text := range extra {
		if strings.Contains(text, secret) {
			t.Errorf("the backend token appears in %s", what)
		}
	}
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		n++
		if bytes.Contains(data, []byte(secret)) || bytes.Contains(data, []byte(strings.ReplaceAll(secret, "$", "$$"))) {
			t.Errorf("the backend token appears in the argv of pid %s: %q", e.Name(), bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
		}
	}
	if n < 5 {
		t.Errorf("read only %d /proc/*/cmdline", n)
	}
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
