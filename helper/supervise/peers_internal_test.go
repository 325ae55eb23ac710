package supervise

import (
	"bufio"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
)

// controlSay sends one line on hold server srv's socket and returns its answer.
func controlSay(t *testing.T, srv *controlServer, line string) string {
	t.Helper()
	c, err := net.DialTimeout("unix", srv.ln.Addr().String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	c.Write([]byte(line + "\n"))
	b, _ := io.ReadAll(io.LimitReader(c, 256))
	return string(b)
}

// TestPeerFinal: a non-batch node's final-scrape listener and the batch
// node's request. Its peer file is the user's, mode 0600. A connection
// without the secret (a wrong HMAC, an overlong line, nothing) triggers
// nothing and gets nothing but the nonce, an idle one is closed within
// PeerRequestWait; the batch node's request with the secret triggers the
// node's final scrape and is answered "done <targets>" once the node's
// samples are newer than the request (an answer without the secret's
// HMAC is not taken). The batch node's hold then answers
// for the whole job only after every other node has answered.
func TestPeerFinal(t *testing.T) {
	out := t.TempDir()
	nodeOut := filepath.Join(out, jobdir.Nodes, "n2")
	if err := os.MkdirAll(nodeOut, 0o700); err != nil {
		t.Fatal(err)
	}
	hold, _ := startControl(t)
	hold.set(2, time.Now().Add(-time.Minute))
	p, err := newPeerServer(nodeOut, "77", "0", hold)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	fi, err := os.Stat(filepath.Join(nodeOut, PeerFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("peer file: %v %v", fi, err)
	}
	peers, why := readPeers(out)
	if len(peers) != 1 || peers[0].node != "n2" || len(why) != 0 {
		t.Fatalf("peers %+v, why %v", peers, why)
	}
	addr := net.JoinHostPort(peers[0].host, strconv.Itoa(peers[0].port))
	hostile := func(what, send string) {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(PeerRequestWait + 3*time.Second))
		r := bufio.NewReader(c)
		if nonce, err := r.ReadString('\n'); err != nil || len(strings.TrimSpace(nonce)) != 32 {
			t.Fatalf("%s: nonce %q %v", what, nonce, err)
		}
		if send != "" {
			c.Write([]byte(send))
		}
		rest, _ := io.ReadAll(r)
		if len(rest) != 0 || len(hold.finals) != 0 {
			t.Errorf("%s: answered %q, %d final requests", what, rest, len(hold.finals))
		}
	}
	hostile("a wrong HMAC", "final "+strings.Repeat("ab", 32)+"\n")
	hostile("another job's HMAC", "final "+peerMAC(peers[0].secret, "78", "0", "x")+"\n")
	hostile("an overlong line", strings.Repeat("f", 10*peerLineMax))
	start := time.Now()
	hostile("an idle connection", "")
	if d := time.Since(start); d > PeerRequestWait+2*time.Second {
		t.Errorf("an idle connection held %v", d)
	}
	// The batch node's supervisor, with the secret; the node's follower
	// sees the final samples once the final scrape was asked.
	go func() {
		<-hold.finals
		time.Sleep(200 * time.Millisecond)
		hold.set(2, time.Now())
	}()
	n, err := askPeer(peers[0], "77", "0")
	if err != nil || n != 2 {
		t.Fatalf("askPeer: %d %v, want 2 targets", n, err)
	}
	// Whatever holds a node's port without its secret cannot end the hold.
	fake, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	go func() {
		c, err := fake.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte(strings.Repeat("a", 32) + "\n"))
		bufio.NewReader(c).ReadString('\n')
		c.Write([]byte("done 5 " + strings.Repeat("cd", 32) + "\n"))
	}()
	forged := peers[0]
	forged.host, forged.port = "127.0.0.1", fake.Addr().(*net.TCPAddr).Port
	if n, err := askPeer(forged, "77", "0"); err == nil {
		t.Errorf("a listener without the secret answered for the node: %d targets", n)
	}
	// A peer file that is not the user's 0600 file is not read.
	os.Chmod(filepath.Join(nodeOut, PeerFile), 0o644)
	if _, err := readPeer(filepath.Join(nodeOut, PeerFile)); err == nil {
		t.Error("a peer file of mode 0644 was read")
	}
	os.Chmod(filepath.Join(nodeOut, PeerFile), 0o600)
	os.Symlink(filepath.Join(nodeOut, PeerFile), filepath.Join(out, "link"))
	if _, err := readPeer(filepath.Join(out, "link")); err == nil {
		t.Error("a peer file through a symbolic link was read")
	}

	// The batch node: "final 3" with one other node's file: no answer to
	// the hold (the step waits its bound); "final 2": the job's answer.
	batch, _ := startControl(t)
	batch.set(1, time.Now().Add(time.Hour)) // this node: sampled; the other nodes decide
	s := &supervisor{out: out, control: batch, log: logrus.New(), opt: Options{Facts: jobfacts.Facts{JobID: "77", RestartCount: "0"}}}
	if got := controlSay(t, batch, "final 3"); got != "ok\n" {
		t.Fatalf("final 3: %q", got)
	}
	<-batch.finals
	s.askPeers(3, time.Now())
	if got := controlSay(t, batch, "sampled"); got != "" {
		t.Errorf("a 3-node job with one other node's file: the hold got %q, want no answer", got)
	}
	go func() {
		<-hold.finals
		hold.set(2, time.Now().Add(time.Second))
	}()
	since := time.Now()
	s.askPeers(2, since)
	if got, want := controlSay(t, batch, "sampled"), string(sampledText(3, since.UnixMilli())); got != want {
		t.Errorf("every node answered: the hold got %q, want %q", got, want)
	}
}
