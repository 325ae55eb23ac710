package supervise

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
)

// EarlyCollector is the host collector the supervisor's process exec'd at
// its very start, before its Go runtime (cmd/gym-otel-spank/early.c,
// launch.EnvEarlyCollector): its package initialisation, most of a
// collector's start, runs while the supervisor starts, and it waits in its
// init for the hand-over (handOver) before it reads its configuration or
// binds a port. It is this process's child, in its own session, with
// SIGTERM at this process's death (the thread that forked it is the
// process's first, which outlives every other).
type EarlyCollector struct {
	argv  []string
	child *proc.Child
	conn  *net.UnixConn // this process's end of the hand-over socket
}

// WatchEarlyCollector takes the collector exec'd early as binary, process
// pid, with sock this process's end of its hand-over socket (a
// SOCK_SEQPACKET pair; taken over and closed here), and waits for its exit
// in the background from here on. Its argv is the host collector's
// (launchCmd). An error (the socket not usable) leaves no collector
// behind.
func WatchEarlyCollector(binary string, pid int, sock *os.File) (*EarlyCollector, error) {
	child, err := proc.WatchPID(pid, binary)
	if err != nil {
		sock.Close()
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return nil, fmt.Errorf("the collector's early exec: %w", err)
	}
	c, err := net.FileConn(sock)
	sock.Close()
	uc, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		if c != nil {
			c.Close()
		}
		child.KillGroup()
		child.WaitExit(timing.FailedStartStop)
		return nil, fmt.Errorf("the collector's early exec: its hand-over socket: %v", err)
	}
	return &EarlyCollector{argv: []string{binary, "--config", "env:" + render.ConfigEnv}, child: child, conn: uc}, nil
}

// Abandon ends an early collector that is not handed its run: the end of
// its socket (its init exits 0 at it), then its group stopped within
// timing.FailedStartStop.
func (e *EarlyCollector) Abandon() {
	e.conn.Close()
	e.child.StopGroup(timing.FailedStartStop, true)
}

// startCollector starts the collector of s.launchArgs: the first run takes
// the early collector where there is one and it takes the run (handOver),
// every other run, and the first where the early one does not, exec's its
// own (start).
func (s *supervisor) startCollector(ctx context.Context) (*collector, error) {
	e := s.opt.Early
	s.opt.Early = nil
	if e != nil {
		c, err := handOver(ctx, e, s.launchArgs)
		if err == nil {
			s.log.Infof("collector: the collector exec'd at the supervisor's start took its run (pid %d)", c.pid)
			return c, nil
		}
		e.Abandon()
		if ctx.Err() != nil {
			return nil, err
		}
		s.log.Warnf("collector: the collector exec'd at the supervisor's start did not take its run (%v): starting it anew", err)
	}
	return start(s.launchArgs)
}

// handOver hands the early collector e the run ls describes: ls's
// environment, this process's resource limits and umask, the collector's
// log (its stdout and stderr, opened as start opens it) and the held
// output dir (its descriptor 3 and working dir), in one message (see
// handoverMessage), and returns the collector once it answered
// launch.HandoverAck, within ctx. An error (another argv than e's, e
// gone, no answer) leaves e to the caller to abandon.
func handOver(ctx context.Context, e *EarlyCollector, ls launchCmd) (*collector, error) {
	if ls.dir == nil || !slices.Equal(ls.argv, e.argv) {
		return nil, fmt.Errorf("it was exec'd as %q, the run is %q", e.argv, ls.argv)
	}
	logf, err := openCollectorLog(ls.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	msg, err := handoverMessage(ls.env)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = e.conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = e.conn.SetDeadline(time.Now()) })
	defer stop()
	rights := syscall.UnixRights(int(logf.Fd()), int(ls.dir.File().Fd()))
	exited := func() error {
		e.child.WaitExit(timing.FailedStartStop)
		return fmt.Errorf("it exited at the hand-over (%v)", e.child.Err())
	}
	if _, _, err := e.conn.WriteMsgUnix(msg, rights, nil); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return nil, exited()
		}
		return nil, fmt.Errorf("the hand-over: %w", err)
	}
	ack := make([]byte, 1)
	n, err := e.conn.Read(ack)
	switch {
	case n == 1 && ack[0] == launch.HandoverAck:
	case errors.Is(err, io.EOF):
		return nil, exited()
	case err != nil:
		return nil, fmt.Errorf("its answer to the hand-over: %w", err)
	default:
		return nil, fmt.Errorf("its answer to the hand-over: %q", ack[:n])
	}
	e.conn.Close()
	c := &collector{Child: e.child, pid: e.child.Pid}
	c.start, _ = proc.StartTime(c.pid)
	return c, nil
}

// handoverMagic begins a hand-over message: its format's name and
// version.
var handoverMagic = [8]byte{'G', 'O', 'S', 'H', 'O', 0, 0, 1}

// maxHandover bounds a hand-over message: the collector receives it whole
// into a buffer of this size (collector/handover.go). The environment is
// bounded by maxConfigEnv's configuration and a few tokens.
const maxHandover = 256 << 10

// rlimitCount is how many resource limits a hand-over carries: Linux's
// RLIMIT_CPU (0) to RLIMIT_RTTIME (15).
const rlimitCount = 16

// handoverMessage is the hand-over's one message, little-endian: the
// magic (8 bytes); this process's umask (uint32); the count of resource
// limits (uint32), each as its resource, its soft and its hard limit
// (uint32, uint64, uint64; the collector lowers its own to these, never
// raises them); then env, each "NAME=value" followed by a NUL. A
// variable holding a NUL, or a message over maxHandover bytes, is an
// error.
func handoverMessage(env []string) ([]byte, error) {
	var b bytes.Buffer
	b.Write(handoverMagic[:])
	mask := syscall.Umask(0o077)
	syscall.Umask(mask)
	_ = binary.Write(&b, binary.LittleEndian, uint32(mask))
	type limit struct {
		Res      uint32
		Cur, Max uint64
	}
	var limits []limit
	for res := 0; res < rlimitCount; res++ {
		var l syscall.Rlimit
		if syscall.Getrlimit(res, &l) == nil {
			limits = append(limits, limit{uint32(res), l.Cur, l.Max})
		}
	}
	_ = binary.Write(&b, binary.LittleEndian, uint32(len(limits)))
	_ = binary.Write(&b, binary.LittleEndian, limits)
	for _, kv := range env {
		if bytes.IndexByte([]byte(kv), 0) >= 0 {
			return nil, fmt.Errorf("the collector's environment: a variable holds a NUL")
		}
		b.WriteString(kv)
		b.WriteByte(0)
	}
	if b.Len() > maxHandover {
		return nil, fmt.Errorf("the hand-over is %d KiB, more than %d KiB", b.Len()>>10, maxHandover>>10)
	}
	return b.Bytes(), nil
}
