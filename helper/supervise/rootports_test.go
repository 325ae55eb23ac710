package supervise_test

import (
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
)

// TestRootChosenPorts: started as root's prolog starts it, with the ports
// root chose (launch.EnvPorts) and the receiver token root minted
// (launch.EnvReceiverToken), the supervisor is ready on exactly those
// ports, its collector takes that token from the tasks, and its readiness
// line (printed on its standard output here) carries no token.
func TestRootChosenPorts(t *testing.T) {
	t.Parallel()
	chosen, err := launch.ChoosePorts(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := harness.StartSup(t, harness.Job{JobID: "8383", Env: []string{launch.EnvPorts + "=" + launch.FormatPorts(chosen)}}).MustReady(t)
	if s.Report.Ports != chosen {
		t.Fatalf("ready on %+v, want root's ports %+v", s.Report.Ports, chosen)
	}
	if strings.Contains(s.Output(), s.ReceiverToken) {
		t.Errorf("the supervisor's output (its readiness line among it) holds the receiver token:\n%s", s.Output())
	}
	post(t, chosen.OTLPHTTP, "traces", s.ReceiverToken, spansJSON("root.token", 1), http.StatusOK)
	post(t, chosen.OTLPHTTP, "traces", "gos_"+harness.RandHex(24), spansJSON("other.token", 1), http.StatusUnauthorized)
}

// TestRootPortTaken: one of root's ports is bound by another socket before
// the supervisor starts (the collector's OTLP HTTP port, or the
// supervisor's own final-figures port). The supervisor does not move to
// ports of its own choosing, which root's packet filter and record do not
// name: it reports failed with PortTaken, so that the prolog chooses anew.
func TestRootPortTaken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		port func(jobdir.Ports) int
	}{
		{"otlp_http", func(p jobdir.Ports) int { return p.OTLPHTTP }},
		{"final", func(p jobdir.Ports) int { return p.Final }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			chosen, err := launch.ChoosePorts(nil)
			if err != nil {
				t.Fatal(err)
			}
			taken := c.port(chosen)
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			s := harness.StartSup(t, harness.Job{JobID: "8484", Env: []string{launch.EnvPorts + "=" + launch.FormatPorts(chosen)}})
			if s.Report.Status != launch.StatusFailed || !s.Report.PortTaken {
				t.Fatalf("port %d taken: report %+v, want failed with port_taken\noutput:\n%s", taken, s.Report, s.Output())
			}
			if !strings.Contains(s.Report.Error, "address already in use") {
				t.Errorf("the report's error does not say the port was in use: %s", s.Report.Error)
			}
			t.Logf("port %d taken: %s", taken, s.Report.Error)
		})
	}
}

// TestRootPortsRefused: a value of launch.EnvPorts that is not seven
// distinct ports fails the start, naming the variable and the value.
func TestRootPortsRefused(t *testing.T) {
	t.Parallel()
	bad := "1,2,3"
	s := harness.StartSup(t, harness.Job{JobID: "8585", Env: []string{launch.EnvPorts + "=" + bad}})
	if s.Report.Status != launch.StatusFailed || !strings.Contains(s.Report.Error, fmt.Sprintf("%s=%q", launch.EnvPorts, bad)) {
		t.Fatalf("%s=%s: report %+v; output:\n%s", launch.EnvPorts, bad, s.Report, s.Output())
	}
}

// TestGateHoldsPorts: started behind root's gate (launch.EnvGateFD), as the
// plugin's prolog starts it while it installs the packet filter, the
// supervisor listens on no port and starts no collector until root opens
// the gate, and is ready on root's ports at once after; a gate closed
// without opening ends its start with a failed report naming it, no port
// ever bound.
func TestGateHoldsPorts(t *testing.T) {
	t.Parallel()
	for _, open := range []bool{true, false} {
		for attempt := 1; ; attempt++ {
			chosen, err := launch.ChoosePorts(nil)
			if err != nil {
				t.Fatal(err)
			}
			gate, opener, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan int, 1)
			seen := make(chan string, 1)
			rendered := make(chan string, 1)
			out := filepath.Join(t.TempDir(), "out")
			go func() {
				pid := <-started
				// Well past the supervisor's start to its first bind
				// (tens of ms), root still installing: nothing of it
				// listens, no collector runs; its configuration, which
				// binds nothing, is rendered already.
				time.Sleep(1500 * time.Millisecond)
				seen <- listensOrStarted(pid)
				rendered <- renderedFor(out, chosen.OTLPHTTP)
				if open {
					opener.Write([]byte{launch.GateOpen})
				}
				opener.Close()
			}()
			s := harness.StartSup(t, harness.Job{JobID: "8384", Env: []string{launch.EnvPorts + "=" + launch.FormatPorts(chosen)}, Gate: gate,
				Output: out, OnStart: func(pid int) { started <- pid }})
			gate.Close()
			if what := <-seen; what != "" {
				t.Errorf("gate open=%v: before root opened the gate the supervisor %s", open, what)
			}
			if what := <-rendered; what != "" {
				t.Errorf("gate open=%v: behind the gate %s", open, what)
			}
			if s.Report.PortTaken && attempt < 3 {
				continue // another process of the host took one of the ports meanwhile
			}
			if s.ReportAfter < 1500*time.Millisecond {
				t.Errorf("gate open=%v: a report %v after the start, before the gate was opened or closed: %+v", open, s.ReportAfter, s.Report)
			}
			if open {
				s.MustReady(t)
				if s.Report.Ports.OTLPHTTP != chosen.OTLPHTTP {
					t.Errorf("ready on %+v, want root's %+v", s.Report.Ports, chosen)
				}
			} else if s.Report.Status != launch.StatusFailed || !strings.Contains(s.Report.Error, "did not open the gate") || s.Report.CollectorPID != 0 {
				t.Errorf("gate closed: report %+v, want failed naming the gate, no collector", s.Report)
			}
			break
		}
	}
}

// renderedFor says how the collector.yaml under out falls short of a
// configuration rendered for root's OTLP HTTP port ("": it is there and
// names the port).
func renderedFor(out string, port int) string {
	var found []string
	_ = filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == jobdir.ConfigFile {
			found = append(found, path)
		}
		return nil
	})
	if len(found) != 1 {
		return fmt.Sprintf("%d %s under the output dir, want 1 (the configuration is rendered before the gate opens)", len(found), jobdir.ConfigFile)
	}
	data, err := os.ReadFile(found[0])
	if err != nil {
		return err.Error()
	}
	if want := fmt.Sprintf("127.0.0.1:%d", port); !strings.Contains(string(data), want) {
		return fmt.Sprintf("%s does not name root's OTLP HTTP endpoint %s", found[0], want)
	}
	return ""
}

// listensOrStarted says what process pid did that it must not before its
// gate opens: a TCP socket of it in LISTEN state, or a child started ("":
// neither).
func listensOrStarted(pid int) string {
	if kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); strings.TrimSpace(string(kids)) != "" {
		return "started a child (pid " + strings.TrimSpace(string(kids)) + ")"
	}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, _ := os.ReadFile(table)
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 9 && f[3] == "0A" && inodes[f[9]] {
				return "listened on " + f[1]
			}
		}
	}
	return ""
}
