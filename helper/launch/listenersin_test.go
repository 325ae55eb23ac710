package launch_test

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// TestListenersIn: root's check of a supervisor's reported ports takes a
// port only when every listener on it is one of the given sockets.
func TestListenersIn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	ours := map[uint64]bool{}
	for _, ino := range proc.SocketInodes(os.Getpid()) {
		ours[ino] = true
	}
	if err := launch.ListenersIn([]int{port}, ours); err != nil {
		t.Errorf("this process's own listener: %v", err)
	}
	if err := launch.ListenersIn([]int{port}, map[uint64]bool{}); err == nil || !strings.Contains(err.Error(), "of no process in the job's cgroup") {
		t.Errorf("a listener not among the job's sockets: %v", err)
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := free.Addr().(*net.TCPAddr).Port
	free.Close()
	if err := launch.ListenersIn([]int{port, nobody}, ours); err == nil || !strings.Contains(err.Error(), "no process of the job's cgroup listens") {
		t.Errorf("a port nobody listens on: %v", err)
	}
}
