package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
)

// InheritedGate takes the gate the plugin's prolog handed down
// (launch.EnvGateFD's value v): the read end of a pipe, made close-on-exec
// (the collector never holds it) and non-blocking (its wait is bounded,
// awaitGate). nil, nil when v is empty. Errors: v not a descriptor, or the
// descriptor not a pipe.
func InheritedGate(v string) (*os.File, error) {
	if v == "" {
		return nil, nil
	}
	fd, err := launch.ParseGateFD(v)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: descriptor %d: %w", launch.EnvGateFD, fd, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, fmt.Errorf("%s: descriptor %d is not a pipe (mode %#o)", launch.EnvGateFD, fd, st.Mode&syscall.S_IFMT)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("%s: descriptor %d: %w", launch.EnvGateFD, fd, err)
	}
	return os.NewFile(uintptr(fd), "gate"), nil
}

// errGateShut is the gate's end without launch.GateOpen: root ended its
// start (the packet filter it requires did not go in; its log says why).
var errGateShut = errors.New("the plugin's prolog did not open the gate (the job's packet filter did not go in: slurmd's log names the cause)")

// awaitGate waits until root writes launch.GateOpen on gate, within ctx,
// and closes gate. Errors: errGateShut at the pipe's end without it, ctx's
// end, a read's.
func awaitGate(ctx context.Context, gate *os.File) error {
	defer gate.Close()
	// The read ends when ctx does (its deadline or a cancel): only then,
	// so that ctx's error is set when the read returns.
	stop := context.AfterFunc(ctx, func() { _ = gate.SetReadDeadline(time.Now()) })
	defer stop()
	var b [1]byte
	n, err := gate.Read(b[:])
	switch {
	case n == 1 && b[0] == launch.GateOpen:
		return nil
	case n == 1:
		return fmt.Errorf("the gate read %q, not %q", b[0], launch.GateOpen)
	case errors.Is(err, io.EOF):
		return errGateShut
	case errors.Is(err, os.ErrDeadlineExceeded):
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for the plugin's prolog to open the gate: %w", ctx.Err())
		}
		return fmt.Errorf("waiting for the plugin's prolog to open the gate: %w", err)
	default:
		return fmt.Errorf("the gate: %w", err)
	}
}
