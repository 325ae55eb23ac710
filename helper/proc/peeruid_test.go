package proc_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// loopbackPair returns both ends of a fresh 127.0.0.1 connection: the
// accepted one and the dialled one.
func loopbackPair(t *testing.T) (server, client net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err = net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return server, client
}

// TestTCPPeerUID: the peer of a loopback connection of this process is
// this process's uid, asked of sock_diag for that one socket; the result
// is the uid /proc/net/tcp lists for it.
func TestTCPPeerUID(t *testing.T) {
	server, client := loopbackPair(t)
	uid, err := proc.TCPPeerUID(server)
	if err != nil {
		t.Fatalf("TCPPeerUID: %v", err)
	}
	if uid != uint32(os.Getuid()) {
		t.Errorf("peer uid %d, want this process's %d", uid, os.Getuid())
	}
	// The same socket seen from the client: its peer is the server's.
	if uid, err := proc.TCPPeerUID(client); err != nil || uid != uint32(os.Getuid()) {
		t.Errorf("the client's peer: uid %d, %v", uid, err)
	}
	// Asked the other way round (the server's own socket as local), the
	// lookup finds the accepted socket.
	own := server.LocalAddr().(*net.TCPAddr).AddrPort()
	peer := server.RemoteAddr().(*net.TCPAddr).AddrPort()
	if uid, err := proc.TCPSocketUID(own, peer); err != nil || uid != uint32(os.Getuid()) {
		t.Errorf("the accepted socket itself: uid %d, %v", uid, err)
	}
}

// mappedClient connects an AF_INET6 socket to ::ffff:127.0.0.1:port and
// returns its descriptor and its local port.
func mappedClient(t *testing.T, port int) (int, int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no IPv6 sockets here: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	to := &unix.SockaddrInet6{Port: port, Addr: netip.MustParseAddr("::ffff:127.0.0.1").As16()}
	if err := unix.Connect(fd, to); err != nil {
		t.Fatalf("connect to [::ffff:127.0.0.1]:%d: %v", port, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, sa.(*unix.SockaddrInet6).Port
}

// TestTCPPeerUIDMapped: a client on an AF_INET6 socket connected to
// ::ffff:127.0.0.1 (listed only in /proc/net/tcp6, where a lookup in
// /proc/net/tcp misses it) is found, with its uid.
func TestTCPPeerUIDMapped(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, cport := mappedClient(t, l.Addr().(*net.TCPAddr).Port)
	server, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	// Where the kernel lists the client: tcp6 only.
	v4 := fmt.Sprintf("0100007F:%04X", cport)
	v6 := fmt.Sprintf("0000000000000000FFFF00000100007F:%04X", cport)
	in := func(path, local string) bool {
		rows, _ := proc.ReadTCP(path)
		for _, r := range rows {
			if r.Local == local {
				return true
			}
		}
		return false
	}
	if in(proc.NetTCP, v4) || !in(proc.NetTCP6, v6) {
		t.Fatalf("the mapped client %s: in tcp %v, in tcp6 %v; want tcp6 only", v6, in(proc.NetTCP, v4), in(proc.NetTCP6, v6))
	}
	uid, err := proc.TCPPeerUID(server)
	if err != nil || uid != uint32(os.Getuid()) {
		t.Errorf("the IPv4-mapped client: uid %d, %v; want %d", uid, err, os.Getuid())
	}
}

// TestTCPPeerUIDVanished: a peer that closed its socket (reset, or closed
// and left to the kernel) is not found: ErrNoSocket, never a uid.
func TestTCPPeerUIDVanished(t *testing.T) {
	t.Run("reset", func(t *testing.T) {
		server, client := loopbackPair(t)
		client.(*net.TCPConn).SetLinger(0) // RST: the socket is gone at once
		client.Close()
		time.Sleep(20 * time.Millisecond)
		if uid, err := proc.TCPPeerUID(server); !errors.Is(err, proc.ErrNoSocket) {
			t.Errorf("a reset peer: uid %d, %v; want ErrNoSocket", uid, err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		server, client := loopbackPair(t)
		client.Close() // FIN: the socket lingers in FIN_WAIT2, owned by no file
		time.Sleep(20 * time.Millisecond)
		if uid, err := proc.TCPPeerUID(server); !errors.Is(err, proc.ErrNoSocket) {
			t.Errorf("a closed peer: uid %d, %v; want ErrNoSocket", uid, err)
		}
	})
	t.Run("time-wait", func(t *testing.T) {
		server, client := loopbackPair(t)
		own := client.LocalAddr().(*net.TCPAddr).AddrPort()
		peer := client.RemoteAddr().(*net.TCPAddr).AddrPort()
		client.Close()
		server.Close() // the client's socket goes to TIME_WAIT (uid 0 in sock_diag)
		time.Sleep(20 * time.Millisecond)
		if uid, err := proc.TCPSocketUID(own, peer); !errors.Is(err, proc.ErrNoSocket) {
			t.Errorf("a TIME_WAIT socket: uid %d, %v; want ErrNoSocket", uid, err)
		}
	})
	t.Run("never", func(t *testing.T) {
		a := netip.MustParseAddrPort("127.0.0.1:1")
		if uid, err := proc.TCPSocketUID(a, netip.MustParseAddrPort("127.0.0.1:2")); !errors.Is(err, proc.ErrNoSocket) {
			t.Errorf("a pair no socket has: uid %d, %v", uid, err)
		}
	})
}

// TestTCPPeerUIDAnotherUser: the peer of a connection made by another
// user's process (nobody, 65534) is that user's uid, on an IPv4 socket and
// on an IPv4-mapped IPv6 one.
func TestTCPPeerUIDAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the client runs as another user")
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := openDir(t)
	cp := copyOfTest(t, dir, 0o755)
	cmd := exec.Command(cp, "-test.run=^TestTCPPeerUIDChild$")
	cmd.Env = []string{"GOS_PEER_PORT=" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "CONNECTED=2" {
		t.Fatalf("the client: %q %v", sc.Text(), sc.Err())
	}
	for i, kind := range []string{"IPv4", "IPv4-mapped IPv6"} {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		uid, err := proc.TCPPeerUID(c)
		if err != nil || uid != 65534 {
			t.Errorf("connection %d (%s) of nobody: uid %d, %v; want 65534", i, kind, uid, err)
		}
		c.Close()
	}
}

// TestTCPPeerUIDChild is the client of TestTCPPeerUIDAnotherUser (skipped
// otherwise): an IPv4 connection and an IPv4-mapped IPv6 one to
// 127.0.0.1:GOS_PEER_PORT, held until its stdin closes.
func TestTCPPeerUIDChild(t *testing.T) {
	port, _ := strconv.Atoi(os.Getenv("GOS_PEER_PORT"))
	if port == 0 {
		t.Skip("the child of TestTCPPeerUIDAnotherUser")
	}
	c, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		fmt.Printf("DIAL %v\n", err)
		return
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // accepted in this order
	mappedClient(t, port)
	fmt.Println("CONNECTED=2")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// TestTableSocketUID: the way without sock_diag reads both tables: it
// finds an IPv4 client in /proc/net/tcp and an IPv4-mapped one in
// /proc/net/tcp6, and not a peer that reset its socket.
func TestTableSocketUID(t *testing.T) {
	why := errors.New("no sock_diag (the test)")
	server, client := loopbackPair(t)
	peer := server.RemoteAddr().(*net.TCPAddr).AddrPort()
	own := server.LocalAddr().(*net.TCPAddr).AddrPort()
	if uid, err := proc.TableSocketUID(peer, own, why); err != nil || uid != uint32(os.Getuid()) {
		t.Errorf("an IPv4 client: uid %d, %v", uid, err)
	}
	client.(*net.TCPConn).SetLinger(0)
	client.Close()
	time.Sleep(20 * time.Millisecond)
	if uid, err := proc.TableSocketUID(peer, own, why); !errors.Is(err, proc.ErrNoSocket) {
		t.Errorf("a reset peer: uid %d, %v; want ErrNoSocket", uid, err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mappedClient(t, l.Addr().(*net.TCPAddr).Port)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, own = c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort()
	if uid, err := proc.TableSocketUID(peer, own, why); err != nil || uid != uint32(os.Getuid()) {
		t.Errorf("an IPv4-mapped client: uid %d, %v", uid, err)
	}
}

// BenchmarkTCPPeerUID is the cost of one peer lookup over sock_diag (the
// guard's per-connection cost), and BenchmarkTCPPeerUIDTables that of the
// way without it (both tables read whole), with the node's connections
// as they are.
func BenchmarkTCPPeerUID(b *testing.B) {
	server, _ := benchPair(b)
	for b.Loop() {
		if _, err := proc.TCPPeerUID(server); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTCPPeerUIDTables(b *testing.B) {
	server, _ := benchPair(b)
	peer, own := server.RemoteAddr().(*net.TCPAddr).AddrPort(), server.LocalAddr().(*net.TCPAddr).AddrPort()
	rows, _ := proc.ReadTCP(proc.NetTCP)
	rows6, _ := proc.ReadTCP(proc.NetTCP6)
	b.ReportMetric(float64(len(rows)+len(rows6)), "rows")
	for b.Loop() {
		if _, err := proc.TableSocketUID(peer, own, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func benchPair(b *testing.B) (net.Conn, net.Conn) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	client, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	server, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { server.Close() })
	return server, client
}
