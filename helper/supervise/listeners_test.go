package supervise

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// A port another user listens on (Debian's node_exporter run as nobody,
// which answers 200 on / like a health check) is not the collector's; a
// port of this process's group is; a port nobody listens on is refused.
func TestVerifyListeners(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (to run a listener as another user)")
	}
	ne := testenv.Binary(t, "prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ours := l.Addr().(*net.TCPAddr).Port
	if err := verifyListeners(syscall.Getpgrp(), []int{ours}); err != nil {
		t.Fatalf("our own listener: %v", err)
	}
	free, _ := net.Listen("tcp", "127.0.0.1:0")
	squat := free.Addr().(*net.TCPAddr).Port
	free.Close()
	cmd := exec.Command(ne, "--web.listen-address=127.0.0.1:"+strconv.Itoa(squat), "--collector.disable-defaults")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(squat)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the squatter did not listen within a minute")
		}
	}
	err = verifyListeners(syscall.Getpgrp(), []int{ours, squat})
	var fl errForeignListener
	if !errors.As(err, &fl) || fl.port != squat {
		t.Fatalf("a listener of another user was accepted: %v", err)
	}
	if err := verifyListeners(syscall.Getpgrp(), []int{squat + 0x10000 - 1}); err == nil {
		t.Fatal("a port nobody listens on was accepted")
	}
}
