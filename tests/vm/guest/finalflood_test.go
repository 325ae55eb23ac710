//go:build vmguest

package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// finalFloodResult is what the finalflood role prints: the tries and
// connections of each kind, the bytes received, the longest time a
// connected IPv4-mapped client waited for the server to close it, and the
// failures by errno name (SELF: a connect that reached its own socket).
type finalFloodResult struct {
	Mapped          int            `json:"mapped"`
	MappedConnected int            `json:"mapped_connected"`
	Flood           int            `json:"flood"`
	FloodConnected  int            `json:"flood_connected"`
	Received        int            `json:"received"`
	HeldMaxMS       int64          `json:"held_max_ms"`
	Errors          map[string]int `json:"errors"`
}

// finalFlood is another user's flood of a job's final-figures port
// (GOS_PORT) until GOS_STOP exists (at most 10 minutes), the guest's port
// of the host's python one (tests/plugin/finalflood_test.go): 16 workers
// connect from AF_INET6 sockets to ::ffff:127.0.0.1 (a peer the kernel
// lists only in /proc/net/tcp6; raw sockets, as Go's dialer would connect
// an IPv4-mapped address from an AF_INET socket) and hold each connection
// until the server closes it (at most 10 s), then again; 2 workers connect
// to 127.0.0.1 and close at once, again and again (1 ms after a refusal).
// After the job the port is free and the kernel may connect a socket to
// itself: that is counted as the error SELF, not as a connection.
func finalFlood() {
	port, _ := strconv.Atoi(os.Getenv("GOS_PORT"))
	end := time.Now().Add(10 * time.Minute)
	var mu sync.Mutex
	res := finalFloodResult{Errors: map[string]int{}}
	note := func(mapped, ok bool, errName string, got int, held time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if mapped {
			res.Mapped++
		} else {
			res.Flood++
		}
		switch {
		case ok && mapped:
			res.MappedConnected++
		case ok:
			res.FloodConnected++
		default:
			res.Errors[errName]++
		}
		res.Received += got
		res.HeldMaxMS = max(res.HeldMaxMS, held.Milliseconds())
	}
	errName := func(err error) string {
		var errno unix.Errno
		if errors.As(err, &errno) {
			return errnoName(errno)
		}
		return "other"
	}
	mapped := func() {
		for !stopped(end) {
			fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				note(true, false, errName(err), 0, 0)
				time.Sleep(time.Millisecond)
				continue
			}
			tv := unix.NsecToTimeval(int64(10 * time.Second))
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
			_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
			sa := &unix.SockaddrInet6{Port: port, Addr: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}
			err = unix.Connect(fd, sa)
			for err == unix.EINTR || err == unix.EALREADY {
				// An interrupted connect goes on in the kernel: wait
				// for it (the runtime's preemption signal, not the
				// server).
				time.Sleep(time.Millisecond)
				err = unix.Connect(fd, sa)
				if err == unix.EISCONN {
					err = nil
				}
			}
			if err == nil && selfConnected(fd) {
				unix.Close(fd)
				note(true, false, "SELF", 0, 0)
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil {
				unix.Close(fd)
				note(true, false, errName(err), 0, 0)
				time.Sleep(time.Millisecond)
				continue
			}
			at, got := time.Now(), 0
			buf := make([]byte, 4096)
			for {
				n, err := unix.Read(fd, buf)
				if err == unix.EINTR {
					continue // the runtime's preemption signal, not the server
				}
				if n > 0 {
					got += n
				}
				if n <= 0 || err != nil {
					break
				}
			}
			held := time.Since(at)
			unix.Close(fd)
			note(true, true, "", got, held)
		}
	}
	flood := func() {
		for !stopped(end) {
			c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
			if err != nil {
				note(false, false, errName(err), 0, 0)
				time.Sleep(time.Millisecond)
				continue
			}
			c.Close()
			note(false, true, "", 0, 0)
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 18; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i < 16 {
				mapped()
			} else {
				flood()
			}
		}()
	}
	wg.Wait()
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}

// selfConnected reports whether the socket fd is connected to itself.
func selfConnected(fd int) bool {
	own, err1 := unix.Getsockname(fd)
	peer, err2 := unix.Getpeername(fd)
	a, ok1 := own.(*unix.SockaddrInet6)
	b, ok2 := peer.(*unix.SockaddrInet6)
	return err1 == nil && err2 == nil && ok1 && ok2 && a.Port == b.Port && a.Addr == b.Addr
}

// plugstackConf is the plugin's line in the guest's plugstack.
const plugstackConf = "/etc/slurm/plugstack.conf.d/gym-otel.conf"

// withPlugstackArg appends arg to the plugin's plugstack line until the
// test ends (slurmd reads the plugstack at each job's prolog).
func withPlugstackArg(t *testing.T, arg string) {
	t.Helper()
	orig, err := os.ReadFile(plugstackConf)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(orig), "\n") {
		if strings.HasPrefix(l, "required ") || strings.HasPrefix(l, "optional ") {
			l += " " + arg
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(plugstackConf, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(plugstackConf, orig, 0o644); err != nil {
			t.Error(err)
		}
	})
}

// TestFinalPortFloodOtherUser: the host's TestFinalPortFloodOtherUser on
// cgroup v2 under systemd. Another user (nobody) floods a running job's
// final-figures port (the supervisor's loopback port that takes the
// collector's last export of its own metrics: the receipt's final figures)
// from the job's first step until its collector has ended: 16 clients on
// IPv4-mapped IPv6 sockets that hold every connection they get and
// reconnect as it closes, and 2 loops of connections closed at once.
// Twice: with the node's packet filter (port_filter=auto), and without it
// (port_filter=off), where the supervisor's uid guard stands alone.
// Asserted: nobody receives not one byte; with the filter none of its
// connects completes and the job's receipt has its final figures,
// complete and without trouble. Without the filter the supervisor's guard
// refuses nobody's connections (its log names uid 65534), and the receipt
// has no trouble and has its final figures or says it lacks them: on this
// guest (TCG, the plugin's group on the job's one CPU) the guard refuses
// more slowly than nobody's loops connect, the listener's accept queue
// fills (4,097 measured) and the collector's last export times out behind
// it, which the test logs with the guard's lookup times and the queue.
func TestFinalPortFloodOtherUser(t *testing.T) {
	for _, filter := range []string{"auto", "off"} {
		t.Run("port_filter="+filter, func(t *testing.T) {
			if filter != "auto" {
				withPlugstackArg(t, "port_filter="+filter)
			}
			finalPortFlood(t, filter == "auto")
		})
	}
}

// mappedPeerLookup is the guard's proof on this kernel: a listener on
// 127.0.0.1 accepts a connection from an AF_INET6 socket to
// ::ffff:127.0.0.1 and one from an AF_INET socket, and asks
// proc.TCPPeerUID (one sock_diag lookup) for each peer's owner, this
// process's uid; it logs what each lookup returned and took.
func mappedPeerLookup(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	for _, mapped := range []bool{true, false} {
		var fd int
		var cerr error
		if mapped {
			fd, cerr = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if cerr == nil {
				cerr = unix.Connect(fd, &unix.SockaddrInet6{Port: port, Addr: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}})
			}
		} else {
			fd, cerr = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if cerr == nil {
				cerr = unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
			}
		}
		if cerr != nil {
			t.Fatalf("connect (IPv4-mapped %v): %v", mapped, cerr)
		}
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		uid, err := proc.TCPPeerUID(c)
		took := time.Since(start)
		t.Logf("the guard's lookup of a peer (IPv4-mapped %v, %v): uid %d, error %v, %v", mapped, c.RemoteAddr(), uid, err, took)
		if err != nil || uid != uint32(os.Getuid()) {
			t.Errorf("the guard's lookup of a peer of this process (IPv4-mapped %v): uid %d, %v; want %d", mapped, uid, err, os.Getuid())
		}
		c.Close()
		unix.Close(fd)
	}
}

// finalPortFlood is one case of TestFinalPortFloodOtherUser; filtered says
// the node's packet filter is on.
func finalPortFlood(t *testing.T, filtered bool) {
	waitIdle(t)
	mappedPeerLookup(t)
	d := jobDir(t, "finalflood")
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf(`#!/bin/bash
touch %[1]s/ready
for i in $(seq 1 1800); do [ -e %[1]s/flooding ] && break; sleep 0.1; done
sleep 2
for i in $(seq 1 5); do srun -n1 true || exit 5; done
sleep 3
true
`, d))
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 2*patience, fmt.Sprintf("sbatch --wait -n1 --mem=200M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	}()
	stop := filepath.Join(d, "stop")
	defer os.WriteFile(stop, nil, 0o644)
	defer os.WriteFile(d+"/flooding", nil, 0o644)
	if !waitFor(patience, func() bool { _, err := os.Stat(d + "/ready"); return err == nil }) {
		t.Fatalf("the batch script never started\nslurmd:\n%s", tail(slurmd(t), 40))
	}
	otel := filepath.Join(d, "run", "otel")
	var st jobdir.State
	if b, err := os.ReadFile(filepath.Join(otel, jobdir.StateFile)); err != nil || json.Unmarshal(b, &st) != nil || st.Ports.Final == 0 {
		t.Fatalf("state.json: no final-figures port: %v %s", err, b)
	}
	cmd, out := asRole(t, other, "finalflood", "GOS_PORT="+strconv.Itoa(st.Ports.Final), "GOS_STOP="+stop)
	time.Sleep(2 * time.Second) // the flood running before the job's steps
	if err := os.WriteFile(d+"/flooding", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The final-figures listener's accept queue while the job runs (ss's
	// Recv-Q of a listening socket: connections the kernel completed that
	// the supervisor has not accepted yet).
	var r result
	var queue, samples int
	for got := false; !got; {
		select {
		case r = <-done:
			got = true
		case <-time.After(time.Second):
			o, _ := run("ss", "-ltnH", fmt.Sprintf("sport = :%d", st.Ports.Final))
			if f := strings.Fields(o); len(f) > 2 {
				n, _ := strconv.Atoi(f[1])
				queue = max(queue, n)
				samples++
			}
		}
	}
	t.Logf("the final-figures listener's accept queue: at most %d connections in %d samples a second apart", queue, samples)
	waitNoCollector(t) // the collector's last export is done
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r.code != 0 {
		jo, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("the job failed (exit %d): %s\n%s", r.code, r.stderr, jo)
	}
	job := jobIDOf(t, r)
	_ = cmd.Wait()
	var f finalFloodResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &f); err != nil {
		t.Fatalf("nobody's flood: %v: %q", err, out.String())
	}
	t.Logf("job %s, nobody on port %d: %d IPv4-mapped connects (%d connected, held at most %d ms), %d flood connects (%d connected), %d bytes received, errors %v",
		job, st.Ports.Final, f.Mapped, f.MappedConnected, f.HeldMaxMS, f.Flood, f.FloodConnected, f.Received, f.Errors)
	for _, l := range strings.Split(jobLines(slurmd(t), job), "\n") {
		if strings.Contains(l, "final-figures port") || strings.Contains(l, "packet filter") || strings.Contains(l, "loopback ports") {
			t.Logf("slurmd: %s", l)
		}
	}
	if f.Mapped < 100 || f.Flood < 100 {
		t.Errorf("nobody's flood made only %d mapped and %d flood connects", f.Mapped, f.Flood)
	}
	if f.Received != 0 {
		t.Errorf("nobody received %d bytes from the job's final-figures port", f.Received)
	}
	if filtered && f.MappedConnected+f.FloodConnected != 0 {
		t.Errorf("with the packet filter nobody connected %d times to the job's final-figures port", f.MappedConnected+f.FloodConnected)
	}
	refusedNobody := false
	for _, f := range []string{jobdir.SupervisorLogFile, jobdir.LogFile} {
		b, _ := os.ReadFile(filepath.Join(otel, f))
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "final-figures") || strings.Contains(l, "final figures") || strings.Contains(l, ":"+strconv.Itoa(st.Ports.Final)) {
				t.Logf("%s: %.400s", f, l)
			}
			if f == jobdir.SupervisorLogFile && strings.Contains(l, "the final-figures port: refused a connection from") && strings.Contains(l, "of uid 65534") {
				refusedNobody = true
			}
		}
	}
	if !filtered && f.MappedConnected+f.FloodConnected > 0 && !refusedNobody {
		t.Errorf("without the packet filter nobody connected %d times, and the supervisor's guard refused none of them as uid 65534's (supervisor.log)", f.MappedConnected+f.FloodConnected)
	}
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatalf("receipt: %v", err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	switch {
	case rc.Trouble():
		t.Errorf("the receipt under the flood has trouble:\n%s", strings.Join(rc.Summary(), "\n"))
	case filtered && !rc.Complete():
		t.Errorf("the receipt under the flood with the packet filter: incomplete, want its final figures")
	case !rc.Complete() && !strings.Contains(strings.Join(rc.Summary(), "\n"), "sent no final figures at its shutdown"):
		t.Errorf("the receipt lost its final figures without saying so")
	case !rc.Complete():
		// Measured, not a pass of the guard: without the filter the
		// supervisor's accept loop refuses each connection (one sock_diag
		// lookup, two for an IPv4-mapped peer) more slowly than nobody's
		// loops connect on this emulated CPU, so the listener's accept
		// queue fills and the collector's last export waits behind it.
		t.Logf("without the packet filter the receipt lost its final figures (said so): the accept queue held up to %d connections, the collector's last export timed out behind them", queue)
	}
	waitIdle(t)
}
