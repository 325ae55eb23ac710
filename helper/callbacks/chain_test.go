package callbacks

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

func lookup(m map[string]string) config.LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParentJob(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GYM_OTEL_JOB": "12", "SLURM_JOB_ID": "12"}, "12"},
		{map[string]string{"GYM_OTEL_JOB": "12", "SLURM_JOB_ID": "13"}, ""}, // another job's marker
		{map[string]string{"SLURM_JOB_ID": "12"}, ""},                       // a job without the collector
		{map[string]string{"GYM_OTEL_JOB": "salloc", "SLURM_JOB_ID": "salloc"}, ""},
	} {
		if got := parentJob(lookup(c.env)); got != c.want {
			t.Errorf("%v: %q, want %q", c.env, got, c.want)
		}
	}
}

// A real process stands in for the running job's collector: its command
// line takes its configuration by content and it runs in the output dir
// (a host collector), or its command line names the output dir's
// collector.yaml (a container runtime); its environment holds the token as
// the supervisor passes it ($ doubled).
func TestParentTokenFromCollector(t *testing.T) {
	jobDir := t.TempDir()
	out := filepath.Join(jobDir, "otel")
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	cwd := out
	start := func(cfg string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", "sleep 30", "--config", cfg)
		cmd.Dir = cwd
		cmd.Env = []string{"OTEL_TOKEN=tok$$en", "PATH=/usr/bin:/bin"}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// Until the child has exec'd, its cmdline is the test binary's.
		for i := 0; i < 200; i++ {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); strings.Contains(string(b), cfg) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return cmd
	}
	state := func(pid int) {
		if err := os.WriteFile(filepath.Join(out, "state.json"), []byte(fmt.Sprintf(`{"status":"ready","collector_pid":%d}`, pid)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	resolved := &config.Resolved{JobDir: jobDir, Otel: config.Otel{TokenEnv: "OTEL_TOKEN"}}
	env := lookup(map[string]string{"GYM_OTEL_JOB": "41", "SLURM_JOB_ID": "41"})

	byContent := "env:" + render.ConfigEnv
	for _, cfg := range []string{byContent, filepath.Join(out, "collector.yaml")} {
		state(start(cfg).Process.Pid)
		tok, err := parentToken(resolved, "41", env)
		if err != nil || tok != "tok$en" {
			t.Fatalf("--config %s: token %q, %v; want tok$en", cfg, tok, err)
		}
	}
	// A pid that is not this dir's collector is refused: another
	// collector.yaml, or a configuration by content run elsewhere.
	state(start("/elsewhere/collector.yaml").Process.Pid)
	if _, err := parentToken(resolved, "41", env); err == nil || !strings.Contains(err.Error(), "is not the collector of") {
		t.Errorf("a foreign process accepted: %v", err)
	}
	cwd = jobDir
	state(start(byContent).Process.Pid)
	if _, err := parentToken(resolved, "41", env); err == nil || !strings.Contains(err.Error(), "is not the collector of") {
		t.Errorf("a collector of another dir accepted: %v", err)
	}
	// No state: a clear reason.
	os.Remove(filepath.Join(out, "state.json"))
	if _, err := parentToken(resolved, "41", env); err == nil || !strings.Contains(err.Error(), "no collector state on this node") {
		t.Errorf("no state: %v", err)
	}
}

// A collector that has exited while its supervisor runs on (restarting
// it, or still draining): the nested submit waits for the restarted one
// and takes its token; once the supervisor has ended (drained, or gone)
// it refuses at once.
func TestParentTokenWaitsForRestart(t *testing.T) {
	jobDir := t.TempDir()
	out := filepath.Join(jobDir, "otel")
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	defer func(w time.Duration) { restartWait = w }(restartWait)
	restartWait = 5 * time.Second
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	state := func(status string, collector, supervisor int) {
		if err := os.WriteFile(filepath.Join(out, "state.json"), []byte(fmt.Sprintf(`{"status":%q,"collector_pid":%d,"supervisor_pid":%d}`, status, collector, supervisor)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	resolved := &config.Resolved{JobDir: jobDir, Otel: config.Otel{TokenEnv: "OTEL_TOKEN"}}
	env := lookup(map[string]string{"GYM_OTEL_JOB": "41", "SLURM_JOB_ID": "41"})

	// The collector died; this process stands for its live supervisor,
	// which brings a new one up 600 ms later.
	state("ready", dead.Process.Pid, os.Getpid())
	go func() {
		time.Sleep(600 * time.Millisecond)
		cmd := exec.Command("/bin/sh", "-c", "sleep 30", "--config", filepath.Join(out, "collector.yaml"))
		cmd.Env = []string{"OTEL_TOKEN=restarted", "PATH=/usr/bin:/bin"}
		if err := cmd.Start(); err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		for i := 0; i < 200; i++ { // until it has exec'd
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); strings.Contains(string(b), "collector.yaml") {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		state("ready", cmd.Process.Pid, os.Getpid())
	}()
	start := time.Now()
	tok, err := parentToken(resolved, "41", env)
	if err != nil || tok != "restarted" {
		t.Fatalf("token %q, %v; want the restarted collector's", tok, err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("took %v: the token came before the new collector", d)
	}
	for _, c := range []struct {
		name             string
		status           string
		supervisor       int
		collectorPIDKept bool
	}{
		{"drained", "drained", os.Getpid(), true},
		{"supervisor gone", "draining", dead.Process.Pid, true},
		{"collector stopped, supervisor gone", "draining", dead.Process.Pid, false},
	} {
		pid := 0
		if c.collectorPIDKept {
			pid = dead.Process.Pid
		}
		state(c.status, pid, c.supervisor)
		start := time.Now()
		if _, err := parentToken(resolved, "41", env); err == nil {
			t.Errorf("%s: a token was found", c.name)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refused after %v, want at once", c.name, d)
		}
	}
}

// Submit nested in a running job without the token takes it from that
// job's collector and marks the spec as a link of the chain.
func TestSubmitNestedTakesParentToken(t *testing.T) {
	jobDir := t.TempDir()
	out := filepath.Join(jobDir, "otel")
	_ = os.MkdirAll(out, 0o700)
	cmd := exec.Command("/bin/sh", "-c", "sleep 30", "--config", filepath.Join(out, "collector.yaml"))
	cmd.Env = []string{"OTEL_TOKEN=parent-token"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	_ = os.WriteFile(filepath.Join(out, "state.json"), []byte(fmt.Sprintf(`{"collector_pid":%d}`, cmd.Process.Pid)), 0o600)
	a := Args{SiteItems: []config.Item{{Key: "endpoint", Value: "https://otlp.example.com"}, {Key: "service_name", Value: "s"}}}
	res, err := Submit(a, "job_dir="+jobDir, "/", lookup(map[string]string{"GYM_OTEL_JOB": "41", "SLURM_JOB_ID": "41"}))
	if err != nil || res.Token != "parent-token" {
		t.Fatalf("nested submit: token %q, %v", res.Token, err)
	}
	r, err := config.Decode(res.Encoded)
	if err != nil || r.ChainedFrom != "41" {
		t.Fatalf("spec: %+v %v", r, err)
	}
	// Outside a job the token must come from the environment.
	if _, err := Submit(a, "job_dir="+jobDir, "/", lookup(nil)); err == nil || !strings.Contains(err.Error(), "otel.token_env") {
		t.Errorf("a submit without a token accepted: %v", err)
	}
}

// The supervisor's token socket in the output dir answers the nested
// submit (the protocol of supervise's token socket, served here by a
// stand-in): its token is taken, with no collector to read. A socket
// owned by another user is refused, and so is one that does not answer.
func TestParentTokenFromSocket(t *testing.T) {
	jobDir := t.TempDir()
	out := filepath.Join(jobDir, "otel")
	if err := os.MkdirAll(out, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(out, jobdir.TokenSocket)
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // a supervisor killed: its socket stays
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, len(jobdir.TokenRequest))
			if _, err := io.ReadFull(c, buf); err == nil && string(buf) == jobdir.TokenRequest {
				c.Write([]byte("from-socket\n"))
			}
			c.Close()
		}
	}()
	if err := os.WriteFile(filepath.Join(out, "state.json"), []byte(`{"status":"ready","collector_pid":1,"supervisor_pid":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	resolved := &config.Resolved{JobDir: jobDir, Otel: config.Otel{TokenEnv: "OTEL_TOKEN"}}
	env := lookup(map[string]string{"GYM_OTEL_JOB": "41", "SLURM_JOB_ID": "41"})
	tok, err := parentToken(resolved, "41", env)
	if err != nil || tok != "from-socket" {
		t.Fatalf("token %q, %v; want the socket's", tok, err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := socketToken(out); err == nil || !strings.Contains(err.Error(), "not a socket of this user's") {
			t.Errorf("another user's socket: %v", err)
		}
		_ = os.Lchown(p, 0, 0)
	}
	ln.Close()
	if _, err := socketToken(out); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("a socket nobody serves: %v", err)
	}
}
