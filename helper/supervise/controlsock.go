package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// The control socket: how root's side of the job talks to the job's
// supervisor on the node. The batch step learns there, after the
// script's last line, that every scrape target (on every node of the job)
// has a sample taken after that line (spank/controlsock.c asks, for
// spank/hold.c); every step tells its start and end (spank/phase.c); the
// job epilog tells its start (afterdrain.go).
//
// The socket is a pathname socket in root's record dir of the job:
// <record_dir>/<node>/<job id>/hold/sock (helper/record's ControlSocketPath),
// its dir root's and 0700. The prolog, as root, makes the dir, binds and
// listens, and hands the listener to the supervisor as an inherited
// descriptor (launch.ControlListenerFD, after the readiness pipe); the supervisor
// only accepts on it (InheritedControlListener) and never sees the path.
// Only root can connect: the dir's permission shuts out every other user,
// the job's own too, so no one else can take the supervisor's connection
// slots or read its answers. Root's record holds the path; the epilog
// removes it with the record, and a stale one of a crashed job goes with
// its stale record (or when the job's id runs again on the node). The
// clients (spank/controlsock.c's gos_control_exchange in the steps,
// launch.TellEpilogStart in the epilog) connect only when the path is a socket
// owned by root in a dir owned by root that neither group nor others can
// write (launch.CheckControlSocket). A supervisor started without the plugin (the
// CLI's supervise by hand, or tests) has no inherited listener and serves
// no control socket: the batch step then waits its bound.
//
// Every line it takes is in controlVerbs, with its words from helper/contract
// (Hold*), which also writes them into the C front's header; the answer
// that takes a line is contract.ControlOK. The batch step sends the request
// line "sampled" and reads less than contract.ControlAnswerMax (256) bytes of
// answer within contract.ControlExchangeMs (250 ms):
//
//	targets=<number of scrape targets on this node>
//	sampled_ms=<unix ms: every target has a sample stamped at or after it; 0: not yet>
//
// The answer is a hint: a wrong value can only shorten or keep the job's
// own wait, never past one scrape interval plus 1 s.
//
// Once the script has ended, the batch step first sends the line "final
// <the job's node count>" (contract.ControlFinal) and reads "ok": the
// supervisor then scrapes every target at once (finalscrape.go: the
// collector is stopped with scrape_on_shutdown, which scrapes each target
// as it stops, and started again without it), so the hold's "sampled"
// answer turns yes within about a second instead of the next interval. In
// a job on several nodes the batch node's supervisor asks the other
// nodes' (peers.go) and answers "sampled" for the whole job, and not at
// all until every node has answered. Only root's (slurmstepd's) request
// counts, and only the first. Every step also sends its start and end
// here as "step ..." lines (phases.go), answered "ok" once the collector
// is ready, and the job epilog (Go, root) its start, "epilog start <unix
// ms>", with the job's exit when slurmd gave it ("<status> <derived>")
// (afterdrain.go). The supervisor still checks each peer
// (SO_PEERCRED: root or its own user, whose "step" and "final" lines do
// not count) although only root can reach the socket.
//
// At most ControlConns connections are served at once, each closed within
// ControlConnTimeout. Connections beyond that wait in the listen queue for a
// slot instead of being closed unanswered; and while every slot is taken,
// the connection that has waited longest for its request line is closed to
// make room (root's clients send their line right after connecting: one
// still silent when another arrives is stuck or gone), so a slow or stuck
// root client cannot keep the others unanswered.
const (
	// ControlConns bounds the connections served at once; more wait for a
	// slot (controlServer.admit).
	ControlConns = 4
	// ControlConnTimeout bounds one connection's request and answer.
	ControlConnTimeout = launch.ControlConnTimeout
)

// DefaultSampledPoll is how often the supervisor reads the new lines of
// metrics.jsonl for the control socket's answer.
const DefaultSampledPoll = 250 * time.Millisecond

// InheritedControlListener takes the control socket's listener the prolog
// handed on at ControlListenerFD: nil and no error when that descriptor is
// closed (no listener: the supervisor serves no control socket); nil and an
// error, leaving the descriptor alone, when it is something else than a
// listening unix stream socket. The listener is close-on-exec (the
// collector never holds it) and the descriptor itself is closed.
func InheritedControlListener() (*net.UnixListener, error) {
	fd := launch.ControlListenerFD
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, nil
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, fmt.Errorf("descriptor %d is not a socket (mode %#o)", fd, st.Mode&syscall.S_IFMT)
	}
	for _, want := range [][3]int{{unix.SO_DOMAIN, unix.AF_UNIX}, {unix.SO_TYPE, unix.SOCK_STREAM}, {unix.SO_ACCEPTCONN, 1}} {
		if v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, want[0]); err != nil || v != want[1] {
			return nil, fmt.Errorf("descriptor %d is not a listening unix stream socket", fd)
		}
	}
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "hold")
	defer f.Close()
	ln, err := net.FileListener(f) // a close-on-exec copy
	if err != nil {
		return nil, fmt.Errorf("descriptor %d: %w", fd, err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("descriptor %d is not a unix listener", fd)
	}
	return ul, nil
}

// controlServer answers root's lines on the control socket.
type controlServer struct {
	ln      *net.UnixListener
	targets atomic.Int64 // -1 until the follower knows
	at      atomic.Int64 // unix ms, 0: not yet
	slots   chan struct{}
	// waiting are the served connections whose request line has not come
	// yet, with their accept times (admit closes the oldest when every
	// slot is taken).
	mu      sync.Mutex
	waiting map[*net.UnixConn]time.Time
	phases  atomic.Pointer[phases] // the steps' phase lines (phases.go); nil until ready
	// finals receives the batch step's final-scrape request (one slot:
	// requests beyond a pending one are dropped).
	finals chan struct{}
	// nodes is the job's node count the batch step's request named, when
	// more than one (0: no request yet, a job on one node, or a request
	// without a count, which finalNodes takes as one node).
	nodes atomic.Int64
	// peerTargets and peersAt are the other nodes' part of the answer in
	// a job on several nodes (peers.go): -1 until every node answered.
	peerTargets atomic.Int64
	peersAt     atomic.Int64
	// stepUID is the only peer uid whose "step" and "final" lines count: root
	// (slurmstepd); tests set their own.
	stepUID uint32
}

// newControlServer serves the control socket on ln (the prolog's listener,
// InheritedControlListener) until close.
func newControlServer(ln *net.UnixListener) *controlServer {
	s := &controlServer{ln: ln, slots: make(chan struct{}, ControlConns), waiting: map[*net.UnixConn]time.Time{}, finals: make(chan struct{}, 1)}
	s.targets.Store(-1)
	s.peerTargets.Store(-1)
	go s.serve()
	return s
}

func (s *controlServer) close() { s.ln.Close() }

// set records the node's number of targets and the time at or after which
// every one has a sample (zero: not yet).
func (s *controlServer) set(targets int, at time.Time) {
	var ms int64
	if !at.IsZero() {
		ms = at.UnixMilli()
	}
	s.at.Store(ms)
	s.targets.Store(int64(targets))
}

func (s *controlServer) serve() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		s.admit(c)
	}
}

// admit serves c in one of the ControlConns slots. While every slot is
// taken, the connection that has waited longest for its request line and
// is silent (nothing to read, controlSilent or more since its accept) is
// closed to make room, and c waits for the next free slot, at most
// ControlConnTimeout; meanwhile later connections wait in the listen queue.
// A connection whose line is there but not yet read (a burst of steps) is
// never closed for another.
func (s *controlServer) admit(c *net.UnixConn) {
	deadline := time.Now().Add(ControlConnTimeout)
	for !s.takeSlot() {
		if time.Now().After(deadline) {
			c.Close()
			return
		}
		s.closeSilent()
		time.Sleep(controlAdmitPoll)
	}
	s.mu.Lock()
	s.waiting[c] = time.Now()
	s.mu.Unlock()
	go func() {
		defer func() { <-s.slots }()
		s.answer(c)
	}()
}

// takeSlot takes one of the ControlConns slots if one is free.
func (s *controlServer) takeSlot() bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// controlSilent is how long a served connection may send nothing before
// admit may close it for another: root's clients send their line right
// after connecting.
const controlSilent = 50 * time.Millisecond

// controlAdmitPoll is how often admit looks again for a slot or a silent
// connection.
const controlAdmitPoll = 5 * time.Millisecond

// closeSilent closes the served connection that has waited longest for its
// request line among those silent for controlSilent or more (nothing to
// read), if any.
func (s *controlServer) closeSilent() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest *net.UnixConn
	var at time.Time
	for c, t := range s.waiting {
		if time.Since(t) >= controlSilent && (oldest == nil || t.Before(at)) && unread(c) == 0 {
			oldest, at = c, t
		}
	}
	if oldest != nil {
		delete(s.waiting, oldest)
		oldest.Close()
	}
}

// unread is the number of bytes waiting to be read on c (-1: unknown).
func unread(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	if err := raw.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil {
			n = v
		}
	}); err != nil {
		return -1
	}
	return n
}

// lineCame takes c off the connections waiting for their request line.
func (s *controlServer) lineCame(c *net.UnixConn) {
	s.mu.Lock()
	delete(s.waiting, c)
	s.mu.Unlock()
}

// controlVerb is one line the control socket takes (controlVerbs).
type controlVerb struct {
	// words are the line's first words (contract.Hold*); the others are
	// the verb's arguments.
	words []string
	// root: only stepUID's (root's, slurmstepd's) line counts; another
	// peer's gets no answer.
	root bool
	// hold answers a line of the server's own (the batch step's hold);
	// "": no answer (the connection is closed unanswered).
	hold func(s *controlServer, args []string) string
	// phase answers a line of the phase spans (phases.go), once the
	// collector is ready (no answer before).
	phase func(p *phases, args []string) string
}

// controlVerbs is every line the control socket takes, the one table of its
// protocol on this side (contract's Hold* names the words, the C client
// spank/controlsock.c and launch.TellEpilogStart send them). A line that
// starts with none of them gets no answer.
var controlVerbs = []controlVerb{
	{words: []string{contract.ControlQuestion}, hold: (*controlServer).sampledAnswer},
	{words: []string{contract.ControlFinal}, root: true, hold: (*controlServer).finalAnswer},
	{words: strings.Fields(contract.ControlStepStart), root: true, phase: (*phases).stepStartLine},
	{words: strings.Fields(contract.ControlStepEnd), root: true, phase: (*phases).stepEndLine},
	{words: strings.Fields(contract.ControlEpilogStart), root: true, phase: (*phases).epilogLine},
}

// controlVerbOf finds line's verb in controlVerbs and its arguments (nil: no
// verb of the socket).
func controlVerbOf(line string) (*controlVerb, []string) {
	f := strings.Fields(line)
	for i := range controlVerbs {
		v := &controlVerbs[i]
		if len(f) >= len(v.words) && slices.Equal(f[:len(v.words)], v.words) {
			return v, f[len(v.words):]
		}
	}
	return nil, nil
}

// answer serves one connection: root or this user only, one request line,
// answered by its verb (controlVerbs).
func (s *controlServer) answer(c *net.UnixConn) {
	defer func() {
		s.lineCame(c)
		c.Close()
	}()
	_ = c.SetDeadline(time.Now().Add(ControlConnTimeout))
	uid, ok := proc.UnixPeerUID(c)
	if !ok || (uid != 0 && uid != uint32(os.Getuid())) {
		return
	}
	line, err := bufio.NewReaderSize(&limitedReader{c, contract.ControlRequestMax}, 16).ReadString('\n')
	s.lineCame(c)
	if err != nil {
		return
	}
	v, args := controlVerbOf(line)
	if v == nil || (v.root && uid != s.stepUID) {
		return
	}
	var a string
	if v.hold != nil {
		a = v.hold(s, args)
	} else if p := s.phases.Load(); p != nil {
		a = v.phase(p, args)
	}
	if a != "" {
		_, _ = c.Write([]byte(a))
	}
}

// finalAnswer serves the batch step's "final [<job's node count>]": it
// queues one final scrape (one pending at most) and answers "ok"; a bad
// count gets no answer.
func (s *controlServer) finalAnswer(args []string) string {
	nodes, ok := finalNodes(args)
	if !ok {
		return ""
	}
	if nodes > 1 {
		s.nodes.CompareAndSwap(0, int64(nodes))
	}
	select {
	case s.finals <- struct{}{}:
	default: // one is pending already
	}
	return okLine
}

// sampledAnswer serves "sampled": the job's targets and the time at or
// after which each has a sample (sampledText), none while not known (the
// step keeps waiting) or with arguments.
func (s *controlServer) sampledAnswer(args []string) string {
	if len(args) != 0 {
		return ""
	}
	t, at := s.targets.Load(), s.at.Load()
	if t < 0 {
		return "" // not known yet: the step keeps waiting
	}
	if s.nodes.Load() > 1 {
		// The whole job's answer: none until every other node has
		// answered (peers.go).
		pt, pat := s.peerTargets.Load(), s.peersAt.Load()
		if pt < 0 {
			return ""
		}
		switch {
		case t == 0:
			at = pat
		case pt > 0:
			at = min(at, pat)
		}
		t += pt
	}
	return string(sampledText(int(t), at))
}

// setPeers records the other nodes' part of the answer: their number of
// targets, each sampled after at.
func (s *controlServer) setPeers(targets int64, at time.Time) {
	s.peersAt.Store(at.UnixMilli())
	s.peerTargets.Store(targets)
}

// finalNodes parses the arguments of the batch step's "final" line: none
// (1 node) or the job's node count (1..maxPeers+1).
func finalNodes(args []string) (nodes int, ok bool) {
	switch len(args) {
	case 0:
		return 1, true
	case 1:
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 || n > maxPeers+1 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// limitedReader reads at most n bytes from r in all.
type limitedReader struct {
	r *net.UnixConn
	n int
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= n
	return n, err
}
