package supervise

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
)

// gatePipe is a gate as the supervisor takes it (InheritedGate on a
// descriptor of its own) and root's write end.
func gatePipe(t *testing.T) (gate, opener *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	gate, err = InheritedGate(strconv.Itoa(fd))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return gate, w
}

// TestAwaitGate: the start goes on only once root writes its byte; the
// pipe's end without it, another byte and the start's deadline each end
// the wait with their own error, within the deadline.
func TestAwaitGate(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		gate, opener := gatePipe(t)
		done := make(chan error, 1)
		go func() { done <- awaitGate(context.Background(), gate) }()
		select {
		case err := <-done:
			t.Fatalf("the wait ended before root opened the gate: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		opener.Write([]byte{launch.GateOpen})
		if err := <-done; err != nil {
			t.Fatalf("opened gate: %v", err)
		}
	})
	t.Run("shut", func(t *testing.T) {
		gate, opener := gatePipe(t)
		opener.Close()
		if err := awaitGate(context.Background(), gate); !errors.Is(err, errGateShut) {
			t.Fatalf("gate closed without its byte: %v, want errGateShut", err)
		}
	})
	t.Run("another byte", func(t *testing.T) {
		gate, opener := gatePipe(t)
		opener.Write([]byte("x"))
		if err := awaitGate(context.Background(), gate); err == nil || !strings.Contains(err.Error(), `'x'`) {
			t.Fatalf("gate read x: %v, want an error naming it", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		gate, _ := gatePipe(t)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		err := awaitGate(ctx, gate)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "open the gate") {
			t.Fatalf("gate never opened: %v, want the start's deadline named", err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Fatalf("the wait took %v past a 200 ms deadline", d)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		gate, _ := gatePipe(t)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		if err := awaitGate(ctx, gate); !errors.Is(err, context.Canceled) {
			t.Fatalf("start cancelled: %v, want context.Canceled", err)
		}
	})
}

// TestInheritedGateChecks: a gate that is not a descriptor above 2, not
// open, or not a pipe is refused with the variable and the descriptor
// named; none is nil, nil.
func TestInheritedGateChecks(t *testing.T) {
	if g, err := InheritedGate(""); g != nil || err != nil {
		t.Fatalf("no gate: %v, %v", g, err)
	}
	f, err := os.CreateTemp(t.TempDir(), "notapipe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct{ v, want string }{
		{"2", launch.EnvGateFD + `="2" is not a descriptor above 2`},
		{"x", launch.EnvGateFD + `="x"`},
		{"999", "descriptor 999"},
		{strconv.Itoa(int(f.Fd())), "is not a pipe"},
	} {
		if _, err := InheritedGate(c.v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gate %q: %v, want %q", c.v, err, c.want)
		}
	}
}
