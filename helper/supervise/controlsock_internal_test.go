package supervise

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
)

// controlListen listens on a socket in a fresh dir of the test's (root's and
// 0700 when the test runs as root, as the prolog makes it) and returns the
// listener and the socket's path.
func controlListen(t *testing.T) (*net.UnixListener, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, path
}

// startControl serves a control socket (controlListen) until the test's end.
func startControl(t *testing.T) (*controlServer, string) {
	t.Helper()
	ln, path := controlListen(t)
	s := newControlServer(ln)
	t.Cleanup(s.close)
	return s, path
}

// controlChildReport is what TestControlInheritedChild prints.
type controlChildReport struct {
	Listener bool   `json:"listener"`
	Err      string `json:"err"`
	FD4Open  bool   `json:"fd4_open"` // the inherited descriptor is still open
	CloExec  bool   `json:"cloexec"`  // the listener's own descriptor is close-on-exec
	Children string `json:"children"` // what a child of this process holds: its /proc/self/fd links
}

// TestControlInheritedChild is the supervisor's side of
// TestControlInheritedListener, in a process of its own (the test binary
// again): it takes the listener at launch.ControlListenerFD (InheritedControlListener),
// reports, and with GOS_HOLD_CHILD=serve answers "sampled" on it (3
// targets) until its stdin closes.
func TestControlInheritedChild(t *testing.T) {
	mode := os.Getenv("GOS_HOLD_CHILD")
	if mode == "" {
		t.Skip("run by TestControlInheritedListener")
	}
	ln, err := InheritedControlListener()
	r := controlChildReport{Listener: ln != nil}
	if err != nil {
		r.Err = err.Error()
	}
	_, ferr := unix.FcntlInt(uintptr(launch.ControlListenerFD), unix.F_GETFD, 0)
	r.FD4Open = ferr == nil
	if ln != nil {
		raw, _ := ln.SyscallConn()
		raw.Control(func(fd uintptr) {
			flags, err := unix.FcntlInt(fd, unix.F_GETFD, 0)
			r.CloExec = err == nil && flags&unix.FD_CLOEXEC != 0
		})
		out, _ := exec.Command("sh", "-c", "for f in /proc/self/fd/*; do readlink $f; done").Output()
		r.Children = strings.Join(strings.Fields(string(out)), " ")
	}
	b, _ := json.Marshal(r)
	fmt.Printf("%s\n", b)
	if mode != "serve" || ln == nil {
		return
	}
	s := newControlServer(ln)
	s.set(3, time.UnixMilli(1700000000123))
	io.Copy(io.Discard, os.Stdin)
	s.close()
}

// TestControlInheritedListener: the supervisor serves the control socket on the
// listener its starter made and handed on at launch.ControlListenerFD (as the
// prolog does): a process of its own takes it (its fd 4 then closed, its
// copy close-on-exec, so that a child of it, the collector, holds none),
// answers on it, and once that process ends nothing answers at the path
// any more (connects are refused: no one else holds the listener). A
// descriptor 4 not handed on gives no listener; one that is a file, a datagram socket or a socket that does not listen gives no
// listener, an error, and is left open.
func TestControlInheritedListener(t *testing.T) {
	child := func(mode string, fd4 *os.File) (*exec.Cmd, io.WriteCloser, controlChildReport) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestControlInheritedChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GOS_HOLD_CHILD="+mode)
		cmd.ExtraFiles = []*os.File{nil, fd4} // fd 3 closed, fd 4 = fd4
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var r controlChildReport
		line, err := bufio.NewReader(out).ReadString('\n')
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: the child's report %q: %v", mode, line, err)
		}
		go io.Copy(io.Discard, out)
		return cmd, in, r
	}
	ln, path := controlListen(t)
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the child's copy alone from here on, as the prolog's
	cmd, stdin, r := child("serve", f)
	f.Close()
	if !r.Listener || r.Err != "" || r.FD4Open || !r.CloExec {
		t.Fatalf("the child: %+v; want a listener, fd 4 closed, close-on-exec", r)
	}
	if strings.Contains(r.Children, "socket:") {
		t.Errorf("a child of the supervisor holds a socket: %s", r.Children)
	}
	say := func() (string, error) {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("sampled\n"))
		b, err := io.ReadAll(io.LimitReader(c, 256))
		return string(b), err
	}
	if got, err := say(); got != "targets=3\nsampled_ms=1700000000123\n" {
		t.Errorf("on the inherited listener: %q %v", got, err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child: %v", err)
	}
	if got, err := say(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after the supervisor's end: %q %v; want the connect refused", got, err)
	}

	// No listener, or something else at fd 4.
	file, err := os.CreateTemp(t.TempDir(), "file")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	dgram, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "dgram"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer dgram.Close()
	df, _ := dgram.File()
	defer df.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := os.NewFile(uintptr(pair[0]), "pair")
	defer conn.Close()
	defer unix.Close(pair[1])
	for _, c := range []struct {
		what string
		fd4  *os.File
	}{{"a file", file}, {"a datagram socket", df}, {"a connected stream socket", conn}} {
		cmd, in, r := child("report", c.fd4)
		in.Close()
		cmd.Wait()
		if r.Listener || r.Err == "" || !r.FD4Open {
			t.Errorf("%s at fd 4: %+v; want no listener, an error, fd 4 left open", c.what, r)
		}
	}
	// Nothing handed on: no listener. (The test binary may have opened
	// a file of its own at fd 4 by then: that one is left alone.)
	cmd, in, r := child("report", nil)
	in.Close()
	cmd.Wait()
	if r.Listener || (r.Err == "") == r.FD4Open {
		t.Errorf("fd 4 not handed on: %+v; want no listener, and an error only for a descriptor of the process's own, left open", r)
	}
}

// TestControlStuckClients: with only root able to connect, root's own
// clients are never left unanswered by the connection bound: while
// ControlConns+2 connections sit idle (a stuck or stopped client), a client
// that sends its line at once is still answered within the steps' bound
// (250 ms); and a burst of 64 steps telling their start at the same
// moment (a job's many parallel steps) gets 64 answers "ok".
func TestControlStuckClients(t *testing.T) {
	s, path := startControl(t)
	s.stepUID = uint32(os.Getuid())
	s.set(1, time.UnixMilli(1700000000123))
	s.phases.Store(newPhases(jobfacts.Facts{JobID: "1", Node: "n"}, time.Now(), time.Now()))
	say := func(line string, bound time.Duration) (string, error) {
		start := time.Now()
		c, err := net.DialTimeout("unix", path, bound)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(start.Add(bound))
		if _, err := c.Write([]byte(line)); err != nil {
			return "", err
		}
		b, err := io.ReadAll(io.LimitReader(c, 256))
		return string(b), err
	}
	var idle []net.Conn
	for i := 0; i < ControlConns+2; i++ {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	time.Sleep(50 * time.Millisecond) // every slot taken by an idle one
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		got, err := say("sampled\n", 250*time.Millisecond)
		if got != "targets=1\nsampled_ms=1700000000123\n" {
			t.Errorf("ask %d beside %d idle connections: %q %v after %v", i+1, len(idle), got, err, time.Since(t0))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if got, err := say(fmt.Sprintf("step start %d %d\n", i, time.Now().UnixMilli()), 2*time.Second); !strings.HasPrefix(got, "ok 00-") {
				errs <- fmt.Sprintf("step %d: %q %v", i, got, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
