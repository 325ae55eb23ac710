package callbacks

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// TestControlListener: the prolog's control socket is root's, 0600, in a dir of
// root's of mode 0700 inside the job's record dir, at the path the record
// names; the listener it returns serves on after the prolog's own copy is
// closed (as the supervisor's inherited one does), passes the epilog's
// check (launch.CheckControlSocket), and another user cannot connect. A
// record dir too long for a socket's path is refused, naming record_dir.
func TestControlListener(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the prolog's control socket is root's: run as root")
	}
	// A base others can search (as /run), so that only the hold dir's
	// own mode keeps another user out.
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := record.MakeJobDir(filepath.Join(base, "records"), "n1", 7)
	if err != nil {
		t.Fatal(err)
	}
	f, path, err := controlListener(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if path != record.ControlSocketPath(dir) {
		t.Errorf("path %s, want %s", path, record.ControlSocketPath(dir))
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || st.Uid != 0 || st.Mode&0o777 != 0o600 {
		t.Errorf("socket: mode %#o uid %d %v", st.Mode, st.Uid, err)
	}
	if err := syscall.Lstat(filepath.Dir(path), &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o700 {
		t.Errorf("socket dir: mode %#o uid %d %v", st.Mode, st.Uid, err)
	}
	if err := launch.CheckControlSocket(path); err != nil {
		t.Errorf("the epilog's check: %v", err)
	}
	// The listener the supervisor would inherit.
	ln, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("ok\n"))
			c.Close()
		}
	}()
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if b, _ := io.ReadAll(c); string(b) != "ok\n" {
		t.Errorf("answer %q", b)
	}
	c.Close()
	// Another user (nobody) cannot connect: the dir is root's, 0700.
	probe := "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect(sys.argv[1]); print('connected')\nexcept OSError as e: print(e.errno)"
	if fi, err := os.Stat(filepath.Dir(filepath.Dir(path))); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("the job's record dir: %v %v", fi, err)
	}
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", probe, path).CombinedOutput()
	if strings.TrimSpace(string(out)) != "13" {
		t.Errorf("another user's connect: %q %v, want EACCES (13)", out, err)
	}
	deep, err := record.MakeJobDir(filepath.Join(t.TempDir(), strings.Repeat("r", 90)), "n1", 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := controlListener(deep); err == nil || !strings.Contains(err.Error(), "record_dir") {
		t.Errorf("a socket path past a unix socket's: %v", err)
	}
}
