// The collector's hand-over from its supervisor (not generated).

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// Names and words of the hand-over; the supervisor's side is
// helper/supervise/handover.go and helper/launch (EnvHandover,
// HandoverAck), and its test runs this binary through it.
const (
	// handoverEnv names the descriptor of the hand-over socket: set only
	// in a collector its supervisor's process exec'd early, before it had
	// the collector's run to give.
	handoverEnv = "GYM_OTEL_HANDOVER_FD"
	// handoverAck is the answer once the hand-over is in place.
	handoverAck = 'h'
	// maxHandover bounds the hand-over message (bytes).
	maxHandover = 256 << 10
	// handoverFDs is how many descriptors it carries: the log, the held
	// output dir.
	handoverFDs = 2
)

// handoverMagic begins a hand-over message: its format's name and version.
var handoverMagic = [8]byte{'G', 'O', 'S', 'H', 'O', 0, 0, 1}

// init takes the hand-over where the collector was exec'd before its run
// was known ($GYM_OTEL_HANDOVER_FD): once every package the collector
// links is initialised (this package's init runs after theirs; this file's
// before startgc.go's, which reads GOGC from the environment the
// hand-over sets), and before main reads the configuration or binds a
// port. Not dumpable first (notdumpable.go does it too, in a later init):
// the tokens arrive here. At the end of the socket without a message (its
// supervisor gone, or starting the collector anew) it exits 0; a message
// it cannot take ends it with 2, said on stderr.
func init() {
	v, ok := os.LookupEnv(handoverEnv)
	if !ok {
		return
	}
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		fmt.Fprintf(os.Stderr, "%s: %q is not a descriptor\n", handoverEnv, v)
		os.Exit(2)
	}
	if err := takeHandover(fd); err != nil {
		fmt.Fprintf(os.Stderr, "the hand-over: %v\n", err)
		os.Exit(2)
	}
}

// takeHandover receives the hand-over on socket fd and puts it in place:
// resource limits lowered to the message's (the open files' soft limit at
// its hard one), its umask, the log as stdout
// and stderr, the held output dir as the working dir, the environment
// exactly the message's (GOMEMLIMIT applied), the answer sent, then the
// held dir as descriptor 3 (fd closed).
func takeHandover(fd int) error {
	buf := make([]byte, maxHandover+1)
	oob := make([]byte, syscall.CmsgSpace(handoverFDs*4))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = syscall.Recvmsg(fd, buf, oob, syscall.MSG_CMSG_CLOEXEC)
		if err != syscall.EINTR {
			break
		}
	}
	if err == nil && n == 0 && oobn == 0 {
		os.Exit(0) // no run for this collector
	}
	if err != nil {
		return err
	}
	fds, ferr := rights(oob[:oobn])
	defer func() {
		for _, f := range fds {
			syscall.Close(f)
		}
	}()
	if flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 || n > maxHandover {
		return fmt.Errorf("the message is longer than %d bytes or carries more than %d descriptors", maxHandover, handoverFDs)
	}
	if ferr != nil {
		return ferr
	}
	if len(fds) != handoverFDs {
		return fmt.Errorf("%d descriptors, not %d", len(fds), handoverFDs)
	}
	h, err := parseHandover(buf[:n])
	if err != nil {
		return err
	}
	for _, l := range h.limits {
		var cur syscall.Rlimit
		if syscall.Getrlimit(int(l.Res), &cur) != nil {
			continue
		}
		want := syscall.Rlimit{Cur: min(cur.Cur, l.Cur), Max: min(cur.Max, l.Max)}
		if l.Res == syscall.RLIMIT_NOFILE {
			// The soft limit at the hard one, as the Go runtime sets
			// it at every start (a collector exec'd later would
			// have raised it so).
			want.Cur = want.Max
		}
		want.Cur = min(want.Cur, want.Max)
		if want != cur {
			if err := syscall.Setrlimit(int(l.Res), &want); err != nil {
				return fmt.Errorf("resource limit %d: %w", l.Res, err)
			}
		}
	}
	syscall.Umask(int(h.umask))
	logFD, dirFD := fds[0], fds[1]
	for _, to := range []int{1, 2} {
		if err := syscall.Dup3(logFD, to, 0); err != nil {
			return fmt.Errorf("the log: %w", err)
		}
	}
	if err := syscall.Fchdir(dirFD); err != nil {
		return fmt.Errorf("the output dir: %w", err)
	}
	os.Clearenv()
	for _, kv := range h.env {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("the environment: %w", err)
		}
	}
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		limit, err := parseMemLimit(v)
		if err != nil {
			return fmt.Errorf("GOMEMLIMIT: %w", err)
		}
		debug.SetMemoryLimit(limit)
	}
	if _, err := syscall.Write(fd, []byte{handoverAck}); err != nil {
		return fmt.Errorf("the answer: %w", err)
	}
	if fd != 3 {
		syscall.Close(fd)
	}
	if err := syscall.Dup3(dirFD, 3, 0); err != nil { // closes the socket at 3
		return fmt.Errorf("the output dir: %w", err)
	}
	return nil
}

// rights returns the descriptors an SCM_RIGHTS control message in oob
// carries.
func rights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		f, err := syscall.ParseUnixRights(&msgs[i])
		if err != nil {
			return fds, err
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

// handover is a parsed hand-over message.
type handover struct {
	umask  uint32
	limits []rlimit
	env    []string
}

// rlimit is one resource limit of a hand-over: Linux's resource number,
// its soft and its hard limit.
type rlimit struct {
	Res      uint32
	Cur, Max uint64
}

// parseHandover reads a hand-over message (helper/supervise's
// handoverMessage): the magic, the umask, the count and the resource
// limits, then NUL-terminated NAME=value strings to its end.
func parseHandover(b []byte) (handover, error) {
	var h handover
	r := bytes.NewReader(b)
	var magic [8]byte
	var count uint32
	if binary.Read(r, binary.LittleEndian, &magic) != nil || magic != handoverMagic {
		return h, fmt.Errorf("not a hand-over message of this version")
	}
	if binary.Read(r, binary.LittleEndian, &h.umask) != nil || binary.Read(r, binary.LittleEndian, &count) != nil || count > 64 {
		return h, fmt.Errorf("the message's header is cut short")
	}
	h.limits = make([]rlimit, count)
	if binary.Read(r, binary.LittleEndian, h.limits) != nil {
		return h, fmt.Errorf("the message's limits are cut short")
	}
	rest := b[len(b)-r.Len():]
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return h, fmt.Errorf("the environment's last variable has no end")
		}
		kv := string(rest[:i])
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return h, fmt.Errorf("%.40q is not NAME=value", kv)
		}
		h.env = append(h.env, kv)
		rest = rest[i+1:]
	}
	return h, nil
}

// parseMemLimit reads a GOMEMLIMIT value as the Go runtime does at its
// start: a number of bytes, optionally followed by B, KiB, MiB, GiB or
// TiB; "off" is no limit.
func parseMemLimit(v string) (int64, error) {
	if v == "off" {
		return 1<<63 - 1, nil
	}
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	shift := uint(0)
	for _, u := range units {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			v, shift = s, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)>>shift {
		return 0, fmt.Errorf("%q is not a memory limit", v)
	}
	return n << shift, nil
}
