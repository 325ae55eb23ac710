package supervise

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// Bounds of the final-figures server (finalSink). The only client is the
// job's collector, which sends one small export per reader period and one
// at its shutdown; every other local user can connect to a loopback port.
const (
	// FinalMaxConns caps the connections the server holds at once; past
	// it, connections wait in the kernel's backlog and take no descriptor
	// of the supervisor's.
	FinalMaxConns = 8
	// FinalHeaderTimeout bounds the wait for a request's headers, and
	// FinalIdleTimeout a kept-alive connection's wait for its next request.
	FinalHeaderTimeout = 5 * time.Second
	FinalIdleTimeout   = 5 * time.Second
	// FinalReadTimeout bounds reading a whole request (at most
	// maxFinalBody), FinalWriteTimeout writing its response.
	FinalReadTimeout  = 30 * time.Second
	FinalWriteTimeout = 10 * time.Second
)

// guardedListener accepts at most max connections at once (a slot is taken
// before Accept and given back when the connection closes) and closes at
// once every connection whose peer socket belongs to another uid than
// this process's (/proc/net/tcp), before it can hold a slot for long.
type guardedListener struct {
	net.Listener
	slots chan struct{}
	uid   uint32
	// foreign counts the connections closed for their peer's uid.
	mu      sync.Mutex
	foreign int
}

func newGuardedListener(l net.Listener, max int) *guardedListener {
	return &guardedListener{Listener: l, slots: make(chan struct{}, max), uid: uint32(os.Getuid())}
}

// Accept waits for a free slot, then for a connection of this uid.
func (g *guardedListener) Accept() (net.Conn, error) {
	for {
		g.slots <- struct{}{}
		c, err := g.Listener.Accept()
		if err != nil {
			<-g.slots
			return nil, err
		}
		if uid, ok := tcpPeerUID(c); ok && uid != g.uid {
			c.Close()
			<-g.slots
			g.mu.Lock()
			g.foreign++
			g.mu.Unlock()
			continue
		}
		return &slotConn{Conn: c, release: func() { <-g.slots }}, nil
	}
}

// Foreign returns how many connections were closed for their peer's uid.
func (g *guardedListener) Foreign() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.foreign
}

// slotConn gives its slot back once, at the first Close.
type slotConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// tcpPeerUID returns the uid owning the other end of a loopback IPv4 TCP
// connection: the /proc/net/tcp socket whose local address is c's remote
// address and whose remote address is c's local one. ok is false when it
// cannot be told (not IPv4, not found, /proc unreadable).
func tcpPeerUID(c net.Conn) (uint32, bool) {
	la, ok1 := c.LocalAddr().(*net.TCPAddr)
	ra, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || la.IP.To4() == nil || ra.IP.To4() == nil {
		return 0, false
	}
	hex := func(a *net.TCPAddr) string {
		return fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32(a.IP.To4()), a.Port)
	}
	local, remote := hex(ra), hex(la)    // the peer socket's view
	rows, _ := proc.ReadTCP(proc.NetTCP) // what was read before an error
	for _, row := range rows {
		if row.Local == local && row.Remote == remote {
			return row.UID, true
		}
	}
	return 0, false
}
