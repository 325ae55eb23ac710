package supervise_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
)

// TestForeignTargetNoted: another local user (nobody) holds the port of a
// job's model service and serves a plausible vLLM page there. The real
// collector scrapes it (it cannot tell); the supervisor notes within one
// look that the target is served by uid 65534, not the job's user, in its
// log and in state.json, and inspect says the target's series are not the
// job's.
func TestForeignTargetNoted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the other user's page runs as nobody")
	}
	port := harness.FreePort(t)
	dir := harness.SharedDir(t)
	cp := supervise.CopyTestBinary(t, dir)
	cmd := exec.Command(cp, "-test.run=^TestForeignPageChild$", "-test.timeout=0")
	cmd.Env = []string{fmt.Sprintf("GOS_FOREIGN_PORT=%d", port)}
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
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	if line, _ := bufio.NewReader(pipe).ReadString('\n'); strings.TrimSpace(line) != hostileServing {
		t.Fatalf("the other user's page: %q", line)
	}
	s := harness.StartSup(t, harness.Job{JobID: "5252", VLLMPort: port, Scrape: 5}).MustReady(t)
	var st jobdir.State
	harness.WaitFor(t, 3*supervise.TargetOwnerPoll, "the foreign target in state.json", func() bool {
		st, err = jobdir.ReadState(s.Out)
		return err == nil && len(st.ForeignTargets) > 0
	})
	f := st.ForeignTargets[0]
	if f.Port != port || f.UID != 65534 || f.Job != "gym-vllm/policy" || len(st.ForeignTargets) != 1 {
		t.Errorf("state.json's foreign targets: %+v", st.ForeignTargets)
	}
	if _, err := s.Drain(t, 30*time.Second); err != nil {
		t.Logf("the drain: %v\n%s", err, s.Output())
	}
	if !strings.Contains(s.Output(), fmt.Sprintf("(127.0.0.1:%d) is served by uid 65534, not the job's user", port)) {
		t.Errorf("the supervisor's log does not name the foreign target:\n%s", s.Output())
	}
	out, _ := exec.Command(harness.CLI(t), "inspect", s.Out).CombinedOutput()
	// The text wraps its lines: compare with the spaces folded.
	if want := fmt.Sprintf("the scrape target gym-vllm/policy (127.0.0.1:%d) was served by uid 65534, not the job's user", port); !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
		t.Errorf("inspect lacks %q:\n%s", want, out)
	}
	if st, err := jobdir.ReadState(s.Out); err != nil || len(st.ForeignTargets) != 1 {
		t.Errorf("state.json after the drain: %+v, %v", st.ForeignTargets, err)
	}
	t.Logf("state.json: %+v; %s", st.ForeignTargets, filepath.Base(s.Out))
}

// TestForeignPageChild serves a small vLLM-like page on GOS_FOREIGN_PORT
// (the child of TestForeignTargetNoted, run as another user).
func TestForeignPageChild(t *testing.T) {
	port := os.Getenv("GOS_FOREIGN_PORT")
	if port == "" {
		t.Skip("the child of TestForeignTargetNoted")
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Printf("listen %s: %v\n", port, err)
		return
	}
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintln(w, "vllm:num_requests_running{model_name=\"m\"} 3")
	}))
	fmt.Println(hostileServing)
	select {}
}
