package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
)

// finalFlood is run by python3 as another local user against a job's
// final-figures port (argv 1) until the file argv 2 exists (at most 10
// minutes): 16 threads connect from AF_INET6 sockets to ::ffff:127.0.0.1
// (a peer listed only in /proc/net/tcp6) and hold each connection until
// the server closes it (at most 10 s), then again; 2 threads connect to
// 127.0.0.1 and close at once, again and again (1 ms after a refusal). It
// counts a connect that reached its own socket (after the job, the port
// free and every other port of the ephemeral range in TIME_WAIT from the
// flood itself, the kernel may connect a socket to itself) as the error
// SELF, not as a connection to the job. It
// prints one JSON object: the tries and connections of each kind, the
// bytes received, the errors by errno name.
const finalFlood = `
import errno, json, os, socket, sys, threading, time
port, stop = int(sys.argv[1]), sys.argv[2]
lock = threading.Lock()
tot = {"mapped": 0, "mapped_connected": 0, "flood": 0, "flood_connected": 0, "received": 0, "errors": {}}
def note(kind, ok, k, got):
    with lock:
        tot[kind] += 1
        if ok:
            tot[kind + "_connected"] += 1
        else:
            tot["errors"][k] = tot["errors"].get(k, 0) + 1
        tot["received"] += got
def mapped():
    end = time.time() + 600
    while not os.path.exists(stop) and time.time() < end:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.settimeout(10)
        ok, k, got = False, None, 0
        try:
            s.connect(("::ffff:127.0.0.1", port))
            if s.getsockname()[:2] == s.getpeername()[:2]:
                raise OSError(-1, "a connection to itself")
            ok = True
            while True:
                b = s.recv(4096)
                if not b:
                    break
                got += len(b)
        except socket.timeout:
            pass
        except OSError as e:
            if not ok:
                k = "SELF" if e.errno == -1 else errno.errorcode.get(e.errno, str(e.errno))
        finally:
            s.close()
        note("mapped", ok, k, got)
        if not ok:
            time.sleep(0.001)
def flood():
    end = time.time() + 600
    while not os.path.exists(stop) and time.time() < end:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ok, k = False, None
        try:
            s.connect(("127.0.0.1", port))
            if s.getsockname() == s.getpeername():
                raise OSError(-1, "a connection to itself")
            ok = True
        except OSError as e:
            k = "SELF" if e.errno == -1 else errno.errorcode.get(e.errno, str(e.errno))
        finally:
            s.close()
        note("flood", ok, k, 0)
        if not ok:
            time.sleep(0.001)
ts = [threading.Thread(target=mapped) for _ in range(16)] + [threading.Thread(target=flood) for _ in range(2)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(tot))
`

// finalFloodResult is what finalFlood prints.
type finalFloodResult struct {
	Mapped          int            `json:"mapped"`
	MappedConnected int            `json:"mapped_connected"`
	Flood           int            `json:"flood"`
	FloodConnected  int            `json:"flood_connected"`
	Received        int            `json:"received"`
	Errors          map[string]int `json:"errors"`
}

// TestFinalPortFloodOtherUser plays another local user (nobody) against a
// running job's final-figures port (the supervisor's loopback port that
// takes the collector's last export of its own metrics, the receipt's
// final figures), from the job's first step to after its end: 16 clients
// on IPv4-mapped IPv6 sockets that hold every connection they get and
// reconnect as it closes, and 2 loops of connections closed at once.
// Twice: with the node's packet filter (port_filter=auto), and without it
// (port_filter=off), where the supervisor's own guard stands alone.
// Asserted: nobody receives not one byte from the port; with the filter
// none of its connects completes (reset), without it each is closed at
// accept; the job's receipt has its final figures, complete and without
// trouble, the collector's last export taken meanwhile.
func TestFinalPortFloodOtherUser(t *testing.T) {
	for _, filter := range []string{"auto", "off"} {
		t.Run("port_filter="+filter, func(t *testing.T) {
			if filter != "auto" {
				withSnippet(t, strings.TrimSpace(goodConf)+" port_filter="+filter+"\n")
			}
			finalPortFlood(t, filter == "auto")
		})
	}
}

// finalPortFlood is one case of TestFinalPortFloodOtherUser; filtered says
// the node's packet filter is on.
func finalPortFlood(t *testing.T, filtered bool) {
	waitIdle(t)
	d := markerDir(t, "finalflood")
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
D=%[1]s
touch $D/ready
for i in $(seq 1 900); do [ -e $D/flooding ] && break; sleep 0.1; done
sleep 2
for i in $(seq 1 5); do srun -n1 true || exit 5; done
sleep 3
true
`, d))
	flood := writeScript(t, filepath.Base(d)+".py", finalFlood)
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 300*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 -w gn1 --wait --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	}()
	defer os.WriteFile(d+"/stop", nil, 0o644)
	defer os.WriteFile(d+"/flooding", nil, 0o644)
	waitFile(t, 60*time.Second, d+"/ready")
	otel := filepath.Join(d, "run", "otel")
	var st jobdir.State
	if b, err := os.ReadFile(filepath.Join(otel, jobdir.StateFile)); err != nil || json.Unmarshal(b, &st) != nil || st.Ports.Final == 0 {
		t.Fatalf("state.json: no final-figures port: %v %s", err, b)
	}
	floods := make(chan result, 1)
	go func() {
		floods <- runAsNobody(t, 10*time.Minute, nil, fmt.Sprintf("python3 %s %d %s/stop", flood, st.Ports.Final, d))
	}()
	time.Sleep(time.Second) // the flood running before the job's steps
	if err := os.WriteFile(d+"/flooding", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	waitNoCollector(t) // the collector's last export is done
	if err := os.WriteFile(d+"/stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("the job failed (exit %d): %s\n%s", r.code, r.stderr, out)
	}
	fr := <-floods
	var f finalFloodResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(fr.stdout)), &f); err != nil || fr.code != 0 {
		t.Fatalf("nobody's flood: exit %d %v: %s", fr.code, err, fr.stdout)
	}
	t.Logf("nobody on port %d: %d IPv4-mapped connects (%d connected), %d flood connects (%d connected), %d bytes received, errors %v",
		st.Ports.Final, f.Mapped, f.MappedConnected, f.Flood, f.FloodConnected, f.Received, f.Errors)
	if f.Mapped < 100 || f.Flood < 100 {
		t.Errorf("nobody's flood made only %d mapped and %d flood connects", f.Mapped, f.Flood)
	}
	if f.Received != 0 {
		t.Errorf("nobody received %d bytes from the job's final-figures port", f.Received)
	}
	if filtered && f.MappedConnected+f.FloodConnected != 0 {
		t.Errorf("with the packet filter nobody connected %d times to the job's final-figures port", f.MappedConnected+f.FloodConnected)
	}
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatalf("receipt: %v", err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	if !rc.Complete() || rc.Trouble() {
		t.Errorf("the receipt under the flood: complete %v, trouble %v: want the final figures without trouble", rc.Complete(), rc.Trouble())
	}
	waitIdle(t)
}
