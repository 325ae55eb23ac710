package supervise

import (
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
// once every connection it cannot prove is of this process's uid: its peer
// socket belongs to another uid, or is not found (the peer closed it, or
// the lookup failed). The proof is proc.TCPPeerUID, one exact sock_diag
// lookup per connection (about 20 µs however many connections the node
// has), so a flood of connections refused here costs the job's own
// connection, waiting in the same backlog, little time.
type guardedListener struct {
	net.Listener
	slots chan struct{}
	uid   uint32
	// what names the port in the log line ("the final-figures port").
	what string

	mu sync.Mutex
	// foreign counts the connections closed for their peer's uid,
	// unproven those closed because the peer's uid could not be told.
	foreign, unproven int
	// logf, when set, gets one line at the first refusal of each kind.
	logf                   func(format string, args ...any)
	loggedForeign, loggedU bool
}

func newGuardedListener(l net.Listener, max int, what string) *guardedListener {
	return &guardedListener{Listener: l, slots: make(chan struct{}, max), uid: uint32(os.Getuid()), what: what}
}

// setLog makes the listener report its first refusal of each kind (another
// uid; a peer not found) through logf; later ones are only counted.
func (g *guardedListener) setLog(logf func(format string, args ...any)) {
	g.mu.Lock()
	g.logf = logf
	g.mu.Unlock()
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
		uid, err := proc.TCPPeerUID(c)
		if err == nil && uid == g.uid {
			return &slotConn{Conn: c, release: func() { <-g.slots }}, nil
		}
		peer := c.RemoteAddr()
		c.Close()
		<-g.slots
		g.refused(peer, uid, err)
	}
}

// refused counts a connection closed at accept and logs the first of its kind.
func (g *guardedListener) refused(peer net.Addr, uid uint32, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var line string
	if err != nil {
		g.unproven++
		if !g.loggedU {
			g.loggedU = true
			line = fmt.Sprintf("%s: refused a connection from %v whose owner cannot be told (%v); later ones are counted only", g.what, peer, err)
		}
	} else {
		g.foreign++
		if !g.loggedForeign {
			g.loggedForeign = true
			line = fmt.Sprintf("%s: refused a connection from %v of uid %d (this job's is %d); later ones are counted only", g.what, peer, uid, g.uid)
		}
	}
	if line != "" && g.logf != nil {
		g.logf("%s", line)
	}
}

// Foreign returns how many connections were closed for their peer's uid.
func (g *guardedListener) Foreign() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.foreign
}

// Unproven returns how many connections were closed because their peer's
// uid could not be told (peer socket not found, lookup failed).
func (g *guardedListener) Unproven() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.unproven
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
