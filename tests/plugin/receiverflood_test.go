package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// receiverFlood is run by python3 as another local user against a job's
// OTLP receivers (argv 1: ports, comma-separated) until the file argv 2
// exists (at most 10 minutes): 200 threads per port connect to 127.0.0.1
// and, on a connection, trickle header lines of 900 bytes every 10 ms
// (the 200 connections of ~900 KiB of headers that once took a collector
// from 12 to 239 MiB) until it breaks, then connect again, 100 ms after a
// refusal. It prints one JSON object: the tries, the connections opened,
// the errors by errno name.
const receiverFlood = `
import errno, json, os, socket, sys, threading, time
ports, stop = [int(p) for p in sys.argv[1].split(",")], sys.argv[2]
lock = threading.Lock()
tot = {"tries": 0, "connected": 0, "errors": {}}
line = b"X-Fill: " + b"a" * 890 + b"\r\n"
def note(ok, k):
    with lock:
        tot["tries"] += 1
        if ok:
            tot["connected"] += 1
        else:
            tot["errors"][k] = tot["errors"].get(k, 0) + 1
def worker(port):
    end = time.time() + 600
    while not os.path.exists(stop) and time.time() < end:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            if s.getsockname() == s.getpeername():
                raise OSError(-1, "a connection to itself")
        except OSError as e:
            s.close()
            note(False, "SELF" if e.errno == -1 else ("timeout" if e.errno is None else errno.errorcode.get(e.errno, str(e.errno))))
            time.sleep(0.1)
            continue
        note(True, None)
        try:
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            while not os.path.exists(stop) and time.time() < end:
                s.sendall(line)
                time.sleep(0.01)
        except OSError:
            pass
        s.close()
ts = [threading.Thread(target=worker, args=(p,)) for p in ports for _ in range(200)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(tot))
`

// receiverFloodResult is what receiverFlood prints.
type receiverFloodResult struct {
	Tries     int            `json:"tries"`
	Connected int            `json:"connected"`
	Errors    map[string]int `json:"errors"`
}

// TestReceiverFloodOtherUsers: connection exhaustion of a running job's
// OTLP receivers by another user (nobody) on the cgroup v1 node, the
// guest's TestReceiverFloodOtherUser: 200 threads per receiver port
// (OTLP/HTTP and gRPC) connect again and again and trickle header lines of
// 900 bytes on whatever connection they get, while the batch script
// exports 40 times with its token. None of the other user's connections
// opens (the packet filter resets them); the collector's memory group
// stays within its bound (memory.max_usage_in_bytes below
// memory.limit_in_bytes, no OOM kill), the collector is the same process
// throughout, and every export of the job is answered 200.
func TestReceiverFloodOtherUsers(t *testing.T) {
	waitIdle(t)
	memory := ""
	for _, m := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(m, "gym_otel")); err == nil {
			memory = m
			break
		}
	}
	d := markerDir(t, "receiverflood")
	const exports = 40
	post := `curl -s -m 10 -o /dev/null -w '%{http_code}\n' -XPOST -H "Authorization: $auth" -H 'Content-Type: application/json' --data '{"resourceSpans":[]}' "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces"`
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
D=%[1]s
auth=${OTEL_EXPORTER_OTLP_HEADERS#Authorization=}; auth=${auth//%%20/ }
echo $SLURM_JOB_ID > $D/ready
for i in $(seq 1 1800); do [ -e $D/go ] && break; sleep 0.1; done
for i in $(seq 1 %[3]d); do %[2]s >> $D/codes; sleep 0.25; done
touch $D/exported
for i in $(seq 1 1800); do [ -e $D/finish ] && break; sleep 0.1; done
true
`, d, post, exports))
	flood := writeScript(t, filepath.Base(d)+".py", receiverFlood)
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 300*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 -w gn1 --wait --mem=300M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	}()
	finish := func() { _ = os.WriteFile(d+"/finish", nil, 0o644) }
	defer finish()
	stop := filepath.Join(d, "stop")
	defer os.WriteFile(stop, nil, 0o644)
	waitFile(t, 60*time.Second, d+"/ready")
	b, _ := os.ReadFile(d + "/ready")
	id := strings.TrimSpace(string(b))
	otel := filepath.Join(d, "run", "otel")
	var st jobdir.State
	if b, err := os.ReadFile(filepath.Join(otel, jobdir.StateFile)); err != nil || json.Unmarshal(b, &st) != nil || st.Ports.OTLPHTTP == 0 {
		t.Fatalf("state.json: %v %s", err, b)
	}
	// The collector's memory group (cgroup v1's memory controller here).
	group := ""
	if memory != "" {
		group = filepath.Join(memory, "gym_otel", clusterName(), "gn1", "job_"+id)
	}
	value := func(file string) int64 {
		b, err := os.ReadFile(filepath.Join(group, file))
		if err != nil {
			return -1
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	usage, peakFile, limitFile := "memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.limit_in_bytes"
	if strings.HasSuffix(memory, "unified") {
		usage, peakFile, limitFile = "memory.current", "memory.peak", "memory.max"
	}
	before, bound := value(usage), value(limitFile)
	if group == "" || before <= 0 || bound <= 0 {
		t.Fatalf("the collector's memory group %q: usage %d, bound %d", group, before, bound)
	}
	ports := fmt.Sprintf("%d,%d", st.Ports.OTLPHTTP, st.Ports.OTLPGRPC)
	floods := make(chan result, 1)
	go func() {
		floods <- runAsNobody(t, 10*time.Minute, nil, fmt.Sprintf("python3 %s %s %s", flood, ports, stop))
	}()
	time.Sleep(3 * time.Second) // the flood under way before the first export
	if err := os.WriteFile(d+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var seen int64
	deadline := time.Now().Add(3 * time.Minute)
	for {
		seen = max(seen, value(usage))
		if _, err := os.Stat(d + "/exported"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the batch script's exports did not end")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fr := <-floods
	peak := value(peakFile)
	ooms := int64(0)
	if b, err := os.ReadFile(filepath.Join(group, "memory.oom_control")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "oom_kill" {
				ooms, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	var after jobdir.State
	if b, err := os.ReadFile(filepath.Join(otel, jobdir.StateFile)); err != nil || json.Unmarshal(b, &after) != nil {
		t.Fatalf("state.json: %v %s", err, b)
	}
	finish()
	r := <-done
	codes, _ := os.ReadFile(d + "/codes")
	var f receiverFloodResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(fr.stdout)), &f); err != nil || fr.code != 0 {
		t.Fatalf("nobody's flood: exit %d %v: %s", fr.code, err, fr.stdout)
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	t.Logf("job %s, ports %s: nobody tried %d connections, %d opened (errors %v); the collector's group %s: %.1f MiB before, %.1f MiB at most while flooded (peak since its start %.1f MiB), bound %.1f MiB, %d OOM kills; the job's exports: %q",
		id, ports, f.Tries, f.Connected, f.Errors, group, mib(before), mib(seen), mib(peak), mib(bound), ooms, strings.Join(strings.Fields(string(codes)), " "))
	if r.code != 0 {
		jo, _ := os.ReadFile(d + "/job.out")
		t.Errorf("the job failed (exit %d): %s\n%s", r.code, r.stderr, jo)
	}
	if f.Tries < 400 || f.Connected != 0 {
		t.Errorf("nobody: %d tries, %d connections opened; want at least 400 tries and none opened", f.Tries, f.Connected)
	}
	if got := strings.Fields(string(codes)); len(got) != exports || strings.Count(string(codes), "200\n") != exports {
		t.Errorf("the job's exports during the flood: %q, want %d times 200", got, exports)
	}
	if peak <= 0 || peak >= bound || ooms != 0 {
		t.Errorf("the collector's group: peak %.1f MiB, bound %.1f MiB, %d OOM kills; want within its bound, none killed", mib(peak), mib(bound), ooms)
	}
	if after.CollectorPID != st.CollectorPID || after.Restarts != st.Restarts {
		t.Errorf("the collector: pid %d, %d restarts before the flood; pid %d, %d restarts after", st.CollectorPID, st.Restarts, after.CollectorPID, after.Restarts)
	}
	waitNoCollector(t)
	waitIdle(t)
}
