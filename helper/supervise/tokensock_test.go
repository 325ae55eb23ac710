package supervise

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// The token socket answers the request line with the token to a process
// of its uid, nothing to a wrong line or a silent peer (each within the
// deadline), is 0600, is refused to another user at connect, and is gone
// once closed.
func TestTokenSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "tokensock")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	_ = os.Chmod(dir, 0o755)
	p := filepath.Join(dir, jobdir.TokenSocket)
	ts, err := newTokenServer(p, "tok$en")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the socket: %v %v, want a 0600 socket", fi.Mode(), err)
	}
	ask := func(req string) (string, error) {
		c, err := net.Dial("unix", p)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if req != "" {
			if _, err := c.Write([]byte(req)); err != nil {
				return "", err
			}
		}
		return bufio.NewReader(c).ReadString('\n')
	}
	if got, err := ask(jobdir.TokenRequest); err != nil || got != "tok$en\n" {
		t.Errorf("the request: %q %v", got, err)
	}
	if got, _ := ask("plugin-token\n"); got != "" {
		t.Errorf("a wrong request answered %q", got)
	}
	start := time.Now()
	if got, _ := ask(""); got != "" {
		t.Errorf("a silent peer answered %q", got)
	}
	if d := time.Since(start); d > tokenDeadline+time.Second {
		t.Errorf("a silent peer held the socket %v", d)
	}
	// Another user (nobody) cannot connect: the socket is 0600.
	if os.Geteuid() == 0 {
		cmd := exec.Command("/usr/bin/python3", "-c", "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'backend-token\\n'); print(s.recv(100))", p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err == nil || strings.Contains(string(out), "tok") || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("another user: %v %s", err, out)
		}
	}
	ts.close()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after close: %v", err)
	}
}
