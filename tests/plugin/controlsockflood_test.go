package plugin_test

import (
	"encoding/json"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// controlSocketOf is the control socket root's record of job on node names (the
// path the steps and the epilog connect to), once the prolog has written a
// ready record; and the supervisor's pid.
func controlSocketOf(t *testing.T, node, job string) (path string, pid int) {
	t.Helper()
	id, err := strconv.ParseUint(job, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	for {
		rec, err := record.Read(record.JobDir(recordDir, node, uint32(id)))
		if err == nil && rec.Status == "ready" && rec.ControlSocket != "" {
			return rec.ControlSocket, rec.SupervisorPID
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s on %s: no ready record with a control socket (%v)", job, node, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holdFlood is run by python3 as a local user: 4 threads each connect to
// the control socket (argv 1: a path, or an abstract name without its
// leading NUL as an older record held), keep a connection they got for
// 200 ms (to hold one of the supervisor's connection slots), close, and
// again (1 ms apart after a refusal), until the file argv 2 exists (at
// most 10 minutes); it prints one JSON object: tries, connected, and the
// errors by errno name.
const holdFlood = `
import errno, json, os, socket, sys, threading, time
name, stop = sys.argv[1], sys.argv[2]
addr = name if name.startswith("/") else "\0" + name
lock = threading.Lock()
tot = {"tries": 0, "connected": 0, "errors": {}}
def loop():
    end = time.time() + 600
    while not os.path.exists(stop) and time.time() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(addr)
            ok, k = True, None
        except OSError as e:
            ok, k = False, errno.errorcode.get(e.errno, str(e.errno))
        with lock:
            tot["tries"] += 1
            if ok:
                tot["connected"] += 1
            else:
                tot["errors"][k] = tot["errors"].get(k, 0) + 1
        time.sleep(0.2 if ok else 0.001)
        s.close()
ts = [threading.Thread(target=loop) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(tot))
`

// floodResult is what holdFlood prints.
type floodResult struct {
	Tries     int            `json:"tries"`
	Connected int            `json:"connected"`
	Errors    map[string]int `json:"errors"`
}

// TestControlSocketFlood: while a job of 20 steps runs, another local user
// and the job's own user each loop connect and close on its control socket
// in 4 threads, keeping each connection they get for 200 ms (the path
// from root's record; they may see it in /proc/net/unix), from before the
// first step to after the job's end. Neither ever connects:
// every try fails with EACCES (the socket's dir is root's, 0700), or with
// ENOENT once the epilog has removed the record dir. Root's
// exchanges are all answered: every step (the stand-in's, the 20 others,
// the batch step) has its slurm.step span in the job's traces.jsonl, and the batch step's final-scrape wait (a vLLM
// stand-in to scrape, interval 15 s, bound 16 s) ends once the final
// sample is in, well before its bound. While the job runs the socket is
// root's, 0600, in a dir of root's of mode 0700.
func TestControlSocketFlood(t *testing.T) {
	vllm := testenv.Standin(t, "vllm-standin")
	if out, err := run("install", "-m", "0755", vllm, filepath.Join(plugDir, "vllm-standin")); err != nil {
		t.Fatalf("install %s: %v %s", vllm, err, out)
	}
	waitIdle(t)
	other := otherUser(t)
	d := markerDir(t, "controlflood")
	const steps = 20
	port := 18171 + 100*atoiOr0(instance)
	cfg := fmt.Sprintf("compute:\n  gymtest:\n    node_pools:\n      n0: {nodes: 1}\ndriver:\n  gym_install: /opt/gym\njob:\n  output_path: %[1]s/run\notel:\n  scrape_interval_seconds: 15\nservices:\n  svc0:\n    type: vllm\n    port: %[2]d\n    served_model_name: tiny-model\n    node_pool: n0\n", d, port)
	if err := os.WriteFile(d+"/gym.yaml", []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The script: started, wait for the flood, a vLLM stand-in for the
	// whole job (its own step), 20 steps, the last line's time.
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
D=%[1]s
touch $D/started
for i in $(seq 1 600); do [ -e $D/flooding ] && break; sleep 0.1; done
srun -n1 --overlap %[2]s/vllm-standin --port %[3]d --model tiny-model &
for i in $(seq 1 300); do curl -sf http://127.0.0.1:%[3]d/health >/dev/null && break; sleep 0.1; done
for i in $(seq 1 %[4]d); do srun -n1 true || exit 5; done
date -u +%%Y-%%m-%%dT%%H:%%M:%%S.%%NZ > $D/last
`, d, plugDir, port, steps))
	flood := writeScript(t, filepath.Base(d)+".py", holdFlood)
	r := asUser(t, 60*time.Second, tokenEnv(), fmt.Sprintf("sbatch -w gn1 --gym-otel=config=%s/gym.yaml -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	job := jobIDOf(t, r)
	defer os.WriteFile(d+"/stop", nil, 0o644)
	defer os.WriteFile(d+"/flooding", nil, 0o644)
	waitFile(t, patience, d+"/started")
	path, pid := controlSocketOf(t, "gn1", job)
	t.Logf("job %s: control socket %s (supervisor %d)", job, path, pid)
	var sock, dir syscall.Stat_t
	if err := syscall.Lstat(path, &sock); err != nil || sock.Mode&syscall.S_IFMT != syscall.S_IFSOCK || sock.Uid != 0 || sock.Mode&0o777 != 0o600 {
		t.Errorf("%s: mode %#o uid %d (%v); want a socket of root's, 0600", path, sock.Mode, sock.Uid, err)
	}
	if err := syscall.Lstat(filepath.Dir(path), &dir); err != nil || dir.Mode&syscall.S_IFMT != syscall.S_IFDIR || dir.Uid != 0 || dir.Mode&0o777 != 0o700 {
		t.Errorf("%s: mode %#o uid %d (%v); want a dir of root's, 0700", filepath.Dir(path), dir.Mode, dir.Uid, err)
	}
	results := map[string]chan result{other: make(chan result, 1), slurmEnv["GOS_SLURM_USER"]: make(chan result, 1)}
	cmd := "python3 " + flood + " " + path + " " + d + "/stop"
	go func() { results[other] <- asOther(t, other, 10*time.Minute, nil, cmd) }()
	go func() { results[slurmEnv["GOS_SLURM_USER"]] <- asUser(t, 10*time.Minute, nil, cmd) }()
	time.Sleep(time.Second) // both loops running before the first step
	if err := os.WriteFile(d+"/flooding", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJobsGone(t, 5*time.Minute, []string{job})
	ended := time.Now()
	if err := os.WriteFile(d+"/stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for who, ch := range results {
		res := <-ch
		var f floodResult
		if err := json.Unmarshal([]byte(strings.TrimSpace(res.stdout)), &f); err != nil || res.code != 0 {
			t.Errorf("%s: the flood: exit %d %v: %s", who, res.code, err, res.stdout)
			continue
		}
		t.Logf("%s: %d connects, %d connected, errors %v", who, f.Tries, f.Connected, f.Errors)
		// ENOENT: after the epilog removed the record dir.
		if f.Errors["EACCES"] < 100 || f.Connected != 0 || f.Errors["EACCES"]+f.Errors["ENOENT"] != f.Tries {
			t.Errorf("%s: %d connects, %d connected, errors %v; want at least 100, every one refused with EACCES (ENOENT once the record is gone)", who, f.Tries, f.Connected, f.Errors)
		}
	}
	waitNoCollector(t)
	if out, _ := os.ReadFile(d + "/job.out"); strings.Contains(string(out), "error") {
		t.Logf("job.out:\n%s", out)
	}
	// Every step's span.
	spans := phaseSpans(t, filepath.Join(d, "run", "otel"))
	seen := map[string]bool{}
	for _, s := range spans {
		if s.Name == vocab.SpanStep {
			seen[s.Attrs[vocab.AttrStepID]] = true
		}
	}
	var missing []string
	for _, id := range append([]string{"batch"}, stepIDs(steps+1)...) {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("steps without a span in traces.jsonl: %v (spans of %v)", missing, seen)
	}
	// The hold ended once the final sample was in.
	logs := slurmdLogs(t)
	early := regexp.MustCompile(`job ` + job + `: every target on gn1 has a sample after the script's last line: final-scrape wait ended after (\d+) ms`).FindStringSubmatch(logs)
	switch {
	case strings.Contains(logs, "job "+job+": the supervisor on gn1 did not take the final-scrape request"):
		t.Errorf("job %s: the supervisor did not take the final-scrape request", job)
	case early == nil:
		t.Errorf("job %s: the final-scrape wait did not end early (%q)", job,
			regexp.MustCompile(`job `+job+`: final-scrape wait [^\n]*`).FindString(logs))
	default:
		ms, _ := strconv.Atoi(early[1])
		t.Logf("job %s: final-scrape wait ended after %d ms of its 16 s; the job ended %v after its last line", job, ms,
			ended.Sub(testenv.ReadTime(t, d+"/last")).Round(time.Millisecond))
		if ms > 8000 {
			t.Errorf("job %s: the final-scrape wait took %d ms", job, ms)
		}
	}
	if log, err := os.ReadFile(filepath.Join(d, "run", "otel", "supervisor.log")); err != nil || strings.Contains(string(log), "panic") {
		t.Errorf("supervisor.log: %v, panic: %v", err, strings.Contains(string(log), "panic"))
	}
	waitIdle(t)
}

// stepIDs are "0" .. "n-1".
func stepIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// atoiOr0 is s as a number, 0 when it is none.
func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
