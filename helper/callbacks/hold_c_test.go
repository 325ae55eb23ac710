package callbacks

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestHoldSampledC: the C side of the hold socket against a listener this
// test plays (the listener's pid is this process's): what ends the hold and
// what does not, including a listener that is not the supervisor and
// hostile answers (garbage, too long, none at all: bounded).
func TestHoldSampledC(t *testing.T) {
	bin := testenv.HoldDriver(t)
	name := fmt.Sprintf("gym-otel-hold-%016x", rand.Uint64())
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@" + name, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answers := make(chan string, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(a string) {
				defer c.Close()
				buf := make([]byte, 64)
				n, _ := c.Read(buf)
				if string(buf[:n]) != "sampled\n" {
					return
				}
				if a == "hang" {
					time.Sleep(3 * time.Second)
					return
				}
				c.Write([]byte(a))
			}(<-answers)
		}
	}()
	pid, uid := strconv.Itoa(os.Getpid()), strconv.Itoa(os.Getuid())
	ask := func(sock, pid, uid, since string) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		out, err := exec.Command(bin, sock, pid, uid, since).Output()
		if err != nil {
			t.Fatalf("%v", err)
		}
		return strings.TrimSpace(string(out)), time.Since(start)
	}
	for _, c := range []struct {
		name, answer, since, want string
	}{
		{"sampled after the end", "targets=2\nsampled_ms=2000\n", "1999", "1"},
		{"sampled at the end", "targets=2\nsampled_ms=2000\n", "2000", "1"},
		{"sampled before the end", "targets=2\nsampled_ms=2000\n", "2001", "0"},
		{"no targets", "targets=0\nsampled_ms=0\n", "5000", "2"},
		{"not yet", "targets=1\nsampled_ms=0\n", "5000", "0"},
		{"no answer", "", "5000", "0"},
		{"a cut answer", "targets=1\nsampled_ms=99", "5", "0"},
		{"garbage", "targets=x\nsampled_ms=9999999999999\n", "5", "0"},
		{"negative", "targets=-1\nsampled_ms=9999999999999\n", "5", "0"},
		{"past 256 bytes", strings.Repeat("#", 300) + "\ntargets=1\nsampled_ms=9999999999999\n", "5", "0"},
	} {
		answers <- c.answer
		if got, _ := ask(name, pid, uid, c.since); got != c.want {
			t.Errorf("%s: gos_hold_sampled = %s, want %s", c.name, got, c.want)
		}
	}
	// A listener that never answers costs the step at most its bound.
	answers <- "hang"
	if got, took := ask(name, pid, uid, "5"); got != "0" || took > 2*time.Second {
		t.Errorf("a silent listener: %s after %v", got, took)
	}
	// A listener that is not the record's supervisor (another pid, or
	// another uid) is not asked; no listener at all is "not yet".
	for _, c := range [][2]string{{strconv.Itoa(os.Getpid() + 1), uid}, {pid, strconv.Itoa(os.Getuid() + 1)}} {
		answers <- "targets=0\nsampled_ms=0\n"
		if got, _ := ask(name, c[0], c[1], "5"); got != "0" {
			t.Errorf("listener pid %s uid %s trusted as the supervisor: %s", c[0], c[1], got)
		}
	}
	if got, _ := ask("gym-otel-hold-"+hex.EncodeToString([]byte("nobodyhe")), pid, uid, "5"); got != "0" {
		t.Errorf("no listener: %s", got)
	}
	if got, _ := ask("", pid, uid, "5"); got != "0" {
		t.Errorf("no socket in the record: %s", got)
	}
}
