package callbacks

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestHoldSampledC: the C side of the control socket against a listener this
// test plays, on a socket of root's in a dir of root's (as the prolog
// makes it): what ends the hold and what does not, hostile answers
// (garbage, too long, none at all: bounded), and sockets the steps do not
// trust (another user's, in a dir others can write, behind a symbolic
// link) or that are not there.
func TestHoldSampledC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the steps trust root's control socket only: run as root")
	}
	bin := testenv.HoldDriver(t)
	answers := make(chan string, 1)
	listen := func() (*net.UnixListener, string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func(a string) {
					defer c.Close()
					buf := make([]byte, 64)
					n, _ := c.Read(buf)
					if string(buf[:n]) != "sampled\n" {
						return
					}
					if a == "hang" {
						time.Sleep(3 * time.Second)
						return
					}
					c.Write([]byte(a))
				}(<-answers)
			}
		}()
		return ln, path
	}
	_, path := listen()
	ask := func(sock, since string) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		out, err := exec.Command(bin, sock, since).Output()
		if err != nil {
			t.Fatalf("%v", err)
		}
		return strings.TrimSpace(string(out)), time.Since(start)
	}
	for _, c := range []struct {
		name, answer, since, want string
	}{
		{"sampled after the end", "targets=2\nsampled_ms=2000\n", "1999", "1"},
		{"sampled at the end", "targets=2\nsampled_ms=2000\n", "2000", "1"},
		{"sampled before the end", "targets=2\nsampled_ms=2000\n", "2001", "0"},
		{"no targets", "targets=0\nsampled_ms=0\n", "5000", "2"},
		{"not yet", "targets=1\nsampled_ms=0\n", "5000", "0"},
		{"no answer", "", "5000", "0"},
		{"a cut answer", "targets=1\nsampled_ms=99", "5", "0"},
		{"garbage", "targets=x\nsampled_ms=9999999999999\n", "5", "0"},
		{"negative", "targets=-1\nsampled_ms=9999999999999\n", "5", "0"},
		{"past 256 bytes", strings.Repeat("#", 300) + "\ntargets=1\nsampled_ms=9999999999999\n", "5", "0"},
	} {
		answers <- c.answer
		if got, _ := ask(path, c.since); got != c.want {
			t.Errorf("%s: gos_hold_sampled = %s, want %s", c.name, got, c.want)
		}
	}
	// A listener that never answers costs the step at most its bound.
	answers <- "hang"
	if got, took := ask(path, "5"); got != "0" || took > 2*time.Second {
		t.Errorf("a silent listener: %s after %v", got, took)
	}
	// Sockets the steps do not trust, each with a live listener that
	// would say "no targets": not asked.
	_, theirs := listen()
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, open := listen()
	if err := os.Chmod(filepath.Dir(open), 0o770); err != nil {
		t.Fatal(err)
	}
	_, foreignDir := listen()
	if err := os.Chown(filepath.Dir(foreignDir), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel("/", path)
	for what, sock := range map[string]string{"another user's socket": theirs, "a dir the group can write": open,
		"a dir of another user's": foreignDir, "a symbolic link": link, "a relative path": rel,
		"an abstract name": "gym-otel-hold-0123456789abcdef", "a path past sun_path": "/" + strings.Repeat("x", 120)} {
		select {
		case answers <- "targets=0\nsampled_ms=0\n":
		default:
		}
		if got, _ := ask(sock, "5"); got != "0" {
			t.Errorf("%s (%s) trusted: %s", what, sock, got)
		}
	}
	select {
	case <-answers:
	default:
	}
	// No socket at the path, or none in the record: "not yet".
	if got, _ := ask(filepath.Join(filepath.Dir(path), "gone"), "5"); got != "0" {
		t.Errorf("no socket: %s", got)
	}
	if got, _ := ask("", "5"); got != "0" {
		t.Errorf("no socket in the record: %s", got)
	}
}
