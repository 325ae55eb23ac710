package supervise

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// The final scrape of a job on several nodes (issue 29).
//
// The batch step can reach only its own node's supervisor (the hold
// socket). That supervisor, the job's user, tells the other nodes'
// supervisors over TCP, and the batch step's hold ends once every node
// has a sample of each of its targets taken after the script's end. The
// rendezvous is the job dir: every other node's supervisor listens on a
// TCP port of its own (all interfaces, chosen by the kernel) and writes
// PeerFile into its output dir (<job dir>/otel/nodes/<node>/, mode 0600,
// the user's own file): its host name, the port and a secret of 32
// random bytes made for this job. The batch node's supervisor reads those
// files through the job dir when it is on a shared file system; root
// never reads them. Without every node's file (a job dir that is not
// shared), or without every node's answer in time, the batch node's
// supervisor gives the hold no answer and the batch step waits its full
// bound (one interval + 1 s) as before; its log says why.
//
// The exchange, one connection per node: the listener sends a fresh nonce
// line (32 hex digits); the batch node's supervisor sends "final <hmac>"
// with the HMAC-SHA256, under the node's secret, of the job id, the
// restart count and the nonce; the listener checks it in constant time,
// asks its own supervisor for the final scrape (finalscrape.go) and
// answers "done <targets> <hmac>" once every target of its node has a
// sample at or after the request (both times of its own clock; the HMAC,
// of the answer and the nonce, shows the answer is the node's), or
// "notyet" at PeerAnswerWait.
//
// Anyone on the network can connect. Without the secret a connection
// gets a nonce and is closed: at most PeerConns at a time, each within
// PeerRequestWait, at most peerLineMax bytes read. With it, the most a
// request can do is the job's own final scrape, once (later requests
// only wait for samples).
const (
	// PeerFile is the peer listener's file in a node's output dir.
	PeerFile = ".final-peer"
	// PeerConns bounds the peer connections served at once.
	PeerConns = 4
	// PeerRequestWait bounds the wait for a connection's request line.
	PeerRequestWait = 2 * time.Second
	// PeerAnswerWait bounds the wait for the node's samples after a
	// valid request.
	PeerAnswerWait = 8 * time.Second
	// PeerDialWait bounds the batch node's connect to one node, and
	// PeerExchangeWait the whole exchange.
	PeerDialWait     = 2 * time.Second
	PeerExchangeWait = PeerRequestWait + PeerAnswerWait
	// peerLineMax bounds every line read, bytes.
	peerLineMax = 160
	// peerFileMax bounds the peer file read, bytes.
	peerFileMax = 512
	// maxPeers bounds the nodes asked.
	maxPeers = 4096
)

// peerMAC is the request's proof: HMAC-SHA256 under secret of the job's
// run and the listener's nonce, hex.
func peerMAC(secret []byte, job, restart, nonce string) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "gym-otel final\n%s\n%s\n%s\n", job, restart, nonce)
	return hex.EncodeToString(m.Sum(nil))
}

// peerServer is a non-batch node's listener for the batch node's
// final-scrape request.
type peerServer struct {
	ln      net.Listener
	secret  []byte
	job     string
	run     string
	control *controlServer
	slots   chan struct{}
}

// newPeerServer listens on a free TCP port of every interface and writes
// the peer file into out.
func newPeerServer(out, job, restart string, control *controlServer) (*peerServer, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	host, err := os.Hostname()
	if err != nil || host == "" || strings.ContainsAny(host, "\n\r\x00 ") {
		return nil, fmt.Errorf("the host name: %q %v", host, err)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, err
	}
	p := &peerServer{ln: ln, secret: secret, job: job, run: restart, control: control, slots: make(chan struct{}, PeerConns)}
	port := ln.Addr().(*net.TCPAddr).Port
	body := fmt.Sprintf("host=%s\nport=%d\nsecret=%s\n", host, port, hex.EncodeToString(secret))
	if err := atomicfile.Write(filepath.Join(out, PeerFile), []byte(body), 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	go p.serve()
	return p, nil
}

func (p *peerServer) close() {
	if p != nil {
		p.ln.Close()
	}
}

func (p *peerServer) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case p.slots <- struct{}{}:
			go func() {
				defer func() { <-p.slots }()
				p.answer(c)
			}()
		default:
			c.Close()
		}
	}
}

// answer serves one connection: nonce, request, the node's final scrape,
// its samples.
func (p *peerServer) answer(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(PeerRequestWait))
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return
	}
	nonce := hex.EncodeToString(b)
	if _, err := io.WriteString(c, nonce+"\n"); err != nil {
		return
	}
	line, err := bufio.NewReaderSize(io.LimitReader(c, peerLineMax), 64).ReadString('\n')
	if err != nil {
		return
	}
	got, ok := strings.CutPrefix(strings.TrimSpace(line), "final ")
	if !ok || !hmac.Equal([]byte(got), []byte(peerMAC(p.secret, p.job, p.run, nonce))) {
		return
	}
	asked := time.Now()
	_ = c.SetDeadline(asked.Add(PeerAnswerWait + time.Second))
	select {
	case p.control.finals <- struct{}{}:
	default:
	}
	for end := asked.Add(PeerAnswerWait); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		// This node's clock on both sides: the samples came after the
		// request, which came after the script's end.
		if targets, at := p.control.targets.Load(), p.control.at.Load(); targets == 0 || targets > 0 && at >= asked.UnixMilli() {
			_, _ = fmt.Fprintf(c, "done %d %s\n", targets, peerMAC(p.secret, p.job, p.run, fmt.Sprintf("done %d %s", targets, nonce)))
			return
		}
	}
	_, _ = io.WriteString(c, "notyet\n")
}

// peer is one other node's listener, from its peer file.
type peer struct {
	node, host string
	port       int
	secret     []byte
}

// readPeers reads the peer files of the job's other nodes under
// <out>/nodes (the batch node's output dir): each a regular file of this
// user, mode 0600, not a link. It returns the peers found and why any
// other node dir has none.
func readPeers(out string) ([]peer, []string) {
	dir := filepath.Join(out, jobdir.Nodes)
	f, err := os.Open(dir)
	if err != nil {
		// The path is the held dir's (/proc/self/fd/...): the caller
		// names the real one.
		return nil, []string{unwrapPath(err).Error()}
	}
	names, err := f.Readdirnames(maxPeers)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, []string{err.Error()}
	}
	var peers []peer
	var why []string
	for _, n := range names {
		pe, err := readPeer(filepath.Join(dir, n, PeerFile))
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		pe.node = n
		peers = append(peers, pe)
	}
	return peers, why
}

func readPeer(path string) (peer, error) {
	var pe peer
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return pe, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return pe, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || !ok || st.Uid != uint32(os.Getuid()) {
		return pe, errors.New("not a regular file of this user with mode 0600")
	}
	b, err := io.ReadAll(io.LimitReader(f, peerFileMax+1))
	if err != nil || len(b) > peerFileMax {
		return pe, fmt.Errorf("unreadable or too long (%v)", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "host":
			pe.host = v
		case "port":
			pe.port, _ = strconv.Atoi(v)
		case "secret":
			pe.secret, _ = hex.DecodeString(v)
		}
	}
	if pe.host == "" || pe.port <= 0 || pe.port > 65535 || len(pe.secret) != 32 {
		return pe, errors.New("malformed")
	}
	return pe, nil
}

// askPeer runs the exchange with one node: its number of targets once
// each has a sample after the request; an error otherwise.
func askPeer(pe peer, job, restart string) (int64, error) {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(pe.host, strconv.Itoa(pe.port)), PeerDialWait)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(PeerExchangeWait))
	r := bufio.NewReaderSize(io.LimitReader(c, 2*peerLineMax), 64)
	nonce, err := r.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("no nonce: %w", err)
	}
	nonce = strings.TrimSpace(nonce)
	if len(nonce) != 32 {
		return 0, errors.New("not a peer listener")
	}
	if _, err := fmt.Fprintf(c, "final %s\n", peerMAC(pe.secret, job, restart, nonce)); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("no answer: %w", err)
	}
	// The answer is the node's too: whatever took its port after it
	// ended cannot end the hold.
	var targets int64
	var mac string
	if n, err := fmt.Sscanf(line, "done %d %s\n", &targets, &mac); n != 2 || err != nil || targets < 0 ||
		!hmac.Equal([]byte(mac), []byte(peerMAC(pe.secret, job, restart, fmt.Sprintf("done %d %s", targets, nonce)))) {
		return 0, fmt.Errorf("answer %q", strings.TrimSpace(line))
	}
	return targets, nil
}

// askPeers asks every other node of a job on nodes nodes for its final
// scrape, and gives the hold the job-wide answer once all have answered
// that each of their targets has a sample after the request (made at
// since, after the script's end). Otherwise the hold gets none and the
// batch step waits its bound; the log says why.
func (s *supervisor) askPeers(nodes int, since time.Time) {
	peers, why := readPeers(s.base())
	if len(peers) != nodes-1 || len(peers) > maxPeers {
		if len(why) == 0 {
			why = []string{"the job dir is not shared with them?"}
		}
		s.log.Infof("final scrape on every node: %d of the job's %d other nodes have a peer file in %s (%s); the batch step waits its full bound",
			len(peers), nodes-1, filepath.Join(s.out, jobdir.Nodes), strings.Join(why, "; "))
		return
	}
	type result struct {
		node    string
		targets int64
		err     error
	}
	res := make(chan result, len(peers))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, pe := range peers {
		wg.Add(1)
		go func(pe peer) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t, err := askPeer(pe, s.opt.Facts.JobID, s.opt.Facts.RestartCount)
			res <- result{pe.node, t, err}
		}(pe)
	}
	wg.Wait()
	close(res)
	var targets int64
	var bad []string
	for r := range res {
		if r.err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", r.node, r.err))
		}
		targets += r.targets
	}
	if len(bad) > 0 {
		s.log.Infof("final scrape on every node: %s; the batch step waits its full bound", strings.Join(bad, "; "))
		return
	}
	s.log.Infof("final scrape on every node: the job's %d other nodes have every target sampled after the script's end (%d targets)", nodes-1, targets)
	s.control.setPeers(targets, since)
}
