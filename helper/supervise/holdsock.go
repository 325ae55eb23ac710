package supervise

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/contract"
)

// The hold socket: how the batch step of a one-node job learns, after the
// script's last line, that every scrape target on the node has a sample
// taken after that line (spank/holdsock.c asks, for spank/hold.c),
// without any file of the user's in root's record directory.
//
// The supervisor listens on an abstract unix socket (no file anywhere; the
// name lives in the network namespace) named contract.HoldSocketPrefix and 16
// random hex digits, and reports the name; the prolog writes it into
// root's record. The step connects, checks with SO_PEERCRED that the
// listener is the record's supervisor (pid and uid), sends the request
// line "sampled" and reads at most 256 bytes of answer within 250 ms:
//
//	targets=<number of scrape targets on this node>
//	sampled_ms=<unix ms: every target has a sample stamped at or after it; 0: not yet>
//
// The answer is a hint: a wrong value can only shorten or keep the job's
// own wait, never past one scrape interval plus 1 s.
//
// Once the script has ended, the batch step first sends the line "final
// <the job's node count>" (contract.HoldFinal) and reads "ok": the
// supervisor then scrapes every target at once (finalscrape.go: the
// collector is stopped with scrape_on_shutdown, which scrapes each target
// as it stops, and started again without it), so the hold's "sampled"
// answer turns yes within about a second instead of the next interval. In
// a job on several nodes the batch node's supervisor asks the other
// nodes' (peers.go) and answers "sampled" for the whole job, and not at
// all until every node has answered. Only root (slurmstepd) may send the
// line, and only the first request counts: anyone else's is not answered. Every step also
// sends its start and end here as "step ..." lines (phases.go), answered
// "ok" once the collector is ready, and the job epilog (Go, root) its
// start, "epilog start <unix ms>" (afterdrain.go). The supervisor answers
// only root and its own user (SO_PEERCRED), at most HoldConns connections
// at a time, each closed within HoldConnTimeout. A "step" line counts only
// from root (slurmstepd, where spank/phase.c sends it): a process of the
// job's user cannot forge its job's Slurm phases; its line gets no answer.
const (
	// HoldConns bounds the connections served at once; more are closed
	// unanswered.
	HoldConns = 4
	// HoldConnTimeout bounds one connection's request and answer.
	HoldConnTimeout = time.Second
	// holdRequestMax bounds the request line, bytes.
	holdRequestMax = 192
)

// DefaultSampledPoll is how often the supervisor reads the new lines of
// metrics.jsonl for the hold socket's answer.
const DefaultSampledPoll = 250 * time.Millisecond

// ValidHoldSocket reports whether name is a hold socket name a supervisor
// makes (contract.HoldSocketPrefix and 16 lowercase hex digits): the prolog writes
// nothing else into root's record.
func ValidHoldSocket(name string) bool {
	hexPart, ok := strings.CutPrefix(name, contract.HoldSocketPrefix)
	if !ok || len(hexPart) != 16 {
		return false
	}
	for _, c := range hexPart {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// holdServer answers the batch step's "sampled" question.
type holdServer struct {
	ln      *net.UnixListener
	name    string
	targets atomic.Int64 // -1 until the follower knows
	at      atomic.Int64 // unix ms, 0: not yet
	slots   chan struct{}
	phases  atomic.Pointer[phases] // the steps' phase lines (phases.go); nil until ready
	// finals receives the batch step's final-scrape request (one slot:
	// requests beyond a pending one are dropped).
	finals chan struct{}
	// nodes is the job's node count the batch step's request named (0:
	// none yet, or a one-node job's request without it).
	nodes atomic.Int64
	// peerTargets and peersAt are the other nodes' part of the answer in
	// a job on several nodes (peers.go): -1 until every node answered.
	peerTargets atomic.Int64
	peersAt     atomic.Int64
	// stepUID is the only peer uid whose "step" and "final" lines count: root
	// (slurmstepd); tests set their own.
	stepUID uint32
}

// newHoldServer listens on a fresh abstract name (a few tries: another
// process may hold a name by chance or on purpose).
func newHoldServer() (*holdServer, error) {
	var last error
	for i := 0; i < 3; i++ {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		name := contract.HoldSocketPrefix + hex.EncodeToString(b)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@" + name, Net: "unix"})
		if err != nil {
			last = err
			continue
		}
		s := &holdServer{ln: ln, name: name, slots: make(chan struct{}, HoldConns), finals: make(chan struct{}, 1)}
		s.targets.Store(-1)
		s.peerTargets.Store(-1)
		go s.serve()
		return s, nil
	}
	return nil, last
}

func (s *holdServer) close() { s.ln.Close() }

// set records the node's number of targets and the time at or after which
// every one has a sample (zero: not yet).
func (s *holdServer) set(targets int, at time.Time) {
	var ms int64
	if !at.IsZero() {
		ms = at.UnixMilli()
	}
	s.at.Store(ms)
	s.targets.Store(int64(targets))
}

func (s *holdServer) serve() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		select {
		case s.slots <- struct{}{}:
			go func() {
				defer func() { <-s.slots }()
				s.answer(c)
			}()
		default:
			c.Close() // HoldConns busy: no answer
		}
	}
}

// answer serves one connection: root or this user only, one request line.
func (s *holdServer) answer(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(HoldConnTimeout))
	uid, ok := peerUID(c)
	if !ok || (uid != 0 && uid != uint32(os.Getuid())) {
		return
	}
	line, err := bufio.NewReaderSize(&limitedReader{c, holdRequestMax}, 16).ReadString('\n')
	if err != nil {
		return
	}
	if req, nodes, ok := finalRequest(line); ok && req {
		if uid != s.stepUID {
			return // slurmstepd's line only
		}
		if nodes > 1 {
			s.nodes.CompareAndSwap(0, int64(nodes))
		}
		select {
		case s.finals <- struct{}{}:
		default: // one is pending already
		}
		_, _ = c.Write([]byte("ok\n"))
		return
	}
	if strings.TrimSpace(line) != contract.HoldQuestion {
		if p := s.phases.Load(); p != nil && uid == s.stepUID {
			_, _ = c.Write([]byte(p.handle(line)))
		}
		return
	}
	t, at := s.targets.Load(), s.at.Load()
	if t < 0 {
		return // not known yet: the step keeps waiting
	}
	if s.nodes.Load() > 1 {
		// The whole job's answer: none until every other node has
		// answered (peers.go).
		pt, pat := s.peerTargets.Load(), s.peersAt.Load()
		if pt < 0 {
			return
		}
		switch {
		case t == 0:
			at = pat
		case pt > 0:
			at = min(at, pat)
		}
		t += pt
	}
	_, _ = c.Write(sampledText(int(t), at))
}

// setPeers records the other nodes' part of the answer: their number of
// targets, each sampled after at.
func (s *holdServer) setPeers(targets int64, at time.Time) {
	s.peersAt.Store(at.UnixMilli())
	s.peerTargets.Store(targets)
}

// finalRequest parses the batch step's request line: "final" or "final
// <job's node count>" (1..maxPeers+1). req is false for any other line.
func finalRequest(line string) (req bool, nodes int, ok bool) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != contract.HoldFinal || len(f) > 2 {
		return false, 0, false
	}
	if len(f) == 1 {
		return true, 1, true
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n < 1 || n > maxPeers+1 {
		return false, 0, false
	}
	return true, n, true
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

// peerUID is the connecting process's uid (SO_PEERCRED).
func peerUID(c *net.UnixConn) (uint32, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil || cred == nil {
		return 0, false
	}
	return cred.Uid, true
}
