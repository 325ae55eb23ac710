package supervise

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// The token socket (jobdir.TokenSocket): how a nested sbatch --gym-otel
// inside the job (Gym's auto-resume submits the next link from the
// script) takes the job's backend token over, now that neither the
// supervisor nor the collector is readable by the job's processes (both
// not dumpable: the plugin's token, which they also hold, must stay out of
// the tasks' reach). The socket is made in the held output dir with this
// process's umask (0077): only the job's user (and root) may connect, and
// a peer of another uid (SO_PEERCRED) is closed unanswered. The backend
// token is the user's own: it came from the user's environment at the
// submit, so any process of that user may have it; the plugin's token is
// never sent. One connection at a time, each bounded by tokenDeadline and
// a request of len(jobdir.TokenRequest) bytes.

// tokenDeadline bounds one exchange on the token socket.
const tokenDeadline = 2 * time.Second

// tokenServer serves the token socket until close.
type tokenServer struct {
	ln    *net.UnixListener
	path  string
	token string
	uid   uint32
	wg    sync.WaitGroup
}

// newTokenServer listens on path (in the held output dir) and serves
// token there to the processes of this process's uid.
func newTokenServer(path, token string) (*tokenServer, error) {
	_ = os.Remove(path) // an earlier run's, on a requeue or a restart
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // removed by close, by its path
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, err
	}
	t := &tokenServer{ln: ln, path: path, token: token, uid: uint32(os.Getuid())}
	t.wg.Add(1)
	go t.serve()
	return t, nil
}

func (t *tokenServer) serve() {
	defer t.wg.Done()
	for {
		c, err := t.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		t.answer(c)
	}
}

// answer answers one connection: the token to a peer of this uid that
// sends the request line within the deadline; nothing to anyone else.
func (t *tokenServer) answer(c *net.UnixConn) {
	defer c.Close()
	if uid, ok := proc.UnixPeerUID(c); !ok || uid != t.uid {
		return
	}
	_ = c.SetDeadline(time.Now().Add(tokenDeadline))
	buf := make([]byte, len(jobdir.TokenRequest))
	if _, err := io.ReadFull(c, buf); err != nil {
		return
	}
	if string(buf) != jobdir.TokenRequest {
		return
	}
	_, _ = c.Write([]byte(t.token + "\n"))
}

// close stops serving and removes the socket.
func (t *tokenServer) close() {
	if t == nil {
		return
	}
	t.ln.Close()
	t.wg.Wait()
	os.Remove(t.path)
}
