package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// tokenFlood is run by python3 as another local user against a job's
// token socket (argv 1) until the file argv 2 exists (at most 10
// minutes): 4 threads ask (connect, send the request line, read what
// comes within 3 s), 4 threads hold (connect, send nothing, keep the
// connection 2.5 s, to take the socket's one-at-a-time server), each again
// at once (1 ms after a refusal). It prints one JSON object: tries,
// connected, bytes received, what was received (at most 4 KiB, as text),
// the errors by errno name, and lstat of the path as this user sees it.
const tokenFlood = `
import errno, json, os, socket, sys, threading, time
path, stop = sys.argv[1], sys.argv[2]
lock = threading.Lock()
tot = {"tries": 0, "connected": 0, "received": 0, "data": "", "errors": {}}
try:
    st = os.lstat(path)
    tot["lstat"] = "mode %o uid %d" % (st.st_mode, st.st_uid)
except OSError as e:
    tot["lstat"] = errno.errorcode.get(e.errno, str(e.errno))
def once(ask):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    got, k = b"", None
    try:
        s.connect(path)
        ok = True
        s.settimeout(3 if ask else 2.5)
        if ask:
            s.sendall(b"backend-token\n")
        try:
            while len(got) < 65536:
                b = s.recv(4096)
                if not b:
                    break
                got += b
        except socket.timeout:
            pass
        except OSError:
            pass
    except OSError as e:
        ok, k = False, errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
    with lock:
        tot["tries"] += 1
        if ok:
            tot["connected"] += 1
        else:
            tot["errors"][k] = tot["errors"].get(k, 0) + 1
        tot["received"] += len(got)
        if len(tot["data"]) < 4096:
            tot["data"] += got.decode("utf-8", "replace")[:4096]
    return ok
def loop(ask):
    end = time.time() + 600
    while not os.path.exists(stop) and time.time() < end:
        if not once(ask):
            time.sleep(0.001)
ts = [threading.Thread(target=loop, args=(i < 4,)) for i in range(8)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(tot))
`

// tokenScan is run by python3 as another local user: it reads every
// file it can below argv 1 (sockets and fifos left out, each file to at
// most 16 MiB) and the environment and command line of every process of
// the uid argv 2 that it can read, and prints, one a line, each place that
// holds the value of $TOKEN_TO_FIND (the test's, never the attacker's:
// the scan only reports), then "scanned N files, M processes".
const tokenScan = `
import os, stat, sys
tok = os.environ.pop("TOKEN_TO_FIND").encode()
top, uid = sys.argv[1], int(sys.argv[2])
files = procs = 0
def look(p):
    global files
    try:
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode):
            return
        with open(p, "rb") as f:
            data = f.read(16 << 20)
    except OSError:
        return
    files += 1
    if tok in data:
        print("found in", p)
for d, subdirs, names in os.walk(top):
    for n in names:
        look(os.path.join(d, n))
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        if os.stat("/proc/" + pid).st_uid != uid:
            continue
    except OSError:
        continue
    procs += 1
    for f in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, f), "rb") as h:
                if tok in h.read():
                    print("found in /proc/%s/%s" % (pid, f))
        except OSError:
            pass
print("scanned %d files, %d processes" % (files, procs))
`

// tokenFloodResult is what tokenFlood prints.
type tokenFloodResult struct {
	Tries     int            `json:"tries"`
	Connected int            `json:"connected"`
	Received  int            `json:"received"`
	Data      string         `json:"data"`
	Errors    map[string]int `json:"errors"`
	Lstat     string         `json:"lstat"`
}

// nestedSubmits is how many nested submits the job makes under the flood;
// nestedBound bounds each (the sbatch run, the token's exchange and its
// retries included: unflooded one takes well under a second).
const (
	nestedSubmits = 5
	nestedBound   = 5 * time.Second
)

// TestTokenSocketOtherUser plays another local user (nobody) against a
// running job's token socket (.token.sock in the node's output dir, which
// a nested sbatch --gym-otel inside the job asks for the backend token).
// The job dir and its output dir are open to others (0755, and
// output_dir_mode=0755, as for a project that shares its telemetry: the
// default output dir of 0700 shuts the path itself), so the socket is what
// stands in the way. While the job
// makes 5 nested submits (held, then cancelled), nobody
// loops on the socket's path in 8 threads, asking for the token or
// holding connections open without a word. Asserted: the socket is the
// job's user's, 0600; nobody gets not one byte from it (its connects are
// refused, EACCES); nothing nobody can read holds the token (the job dir
// and every file below it, the job's processes' environment and command
// line); every nested submit is accepted, each within 5 s. A socket of
// mode 0666 whose server answers whoever asks hands nobody the token; one
// whose server reads a connection's request before it checks the peer lets
// nobody's silent connections take the server, and the nested submits
// wait out their retries.
func TestTokenSocketOtherUser(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "tokensock")
	u, err := user.Lookup(slurmEnv["GOS_SLURM_USER"])
	if err != nil {
		t.Fatalf("the job's user %q: %v", slurmEnv["GOS_SLURM_USER"], err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	// The job dir, made by the job's user as a shared project's is: 0755.
	if err := os.Mkdir(d+"/run", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d+"/run", uid, uid); err != nil {
		t.Fatal(err)
	}
	spec := "job_dir=" + d + "/run,output_dir_mode=0755"
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
D=%[1]s
touch $D/ready
for i in $(seq 1 900); do [ -e $D/flooding ] && break; sleep 0.1; done
sleep 1
for i in $(seq 1 %[2]d); do
    t0=$(date +%%s%%N)
    out=$(sbatch --hold --gym-otel=%[3]s -o /dev/null --wrap true 2>&1); rc=$?
    t1=$(date +%%s%%N)
    echo "$rc $(( (t1 - t0) / 1000000 )) $(echo "$out" | tr '\n' ' ')" >> $D/nested
    id=$(echo "$out" | sed -n 's/.*Submitted batch job \([0-9]*\).*/\1/p')
    [ -n "$id" ] && scancel $id
    sleep 0.3
done
touch $D/nested.done
for i in $(seq 1 1200); do [ -e $D/scanned ] && break; sleep 0.1; done
true
`, d, nestedSubmits, spec))
	flood := writeScript(t, filepath.Base(d)+".flood.py", tokenFlood)
	scan := writeScript(t, filepath.Base(d)+".scan.py", tokenScan)
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 300*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 -w gn1 --wait --gym-otel=%s -o %s/job.out %s", spec, d, script))
	}()
	defer os.WriteFile(d+"/scanned", nil, 0o644)
	defer os.WriteFile(d+"/stop", nil, 0o644)
	defer os.WriteFile(d+"/flooding", nil, 0o644)
	waitFile(t, 60*time.Second, d+"/ready")
	sock := filepath.Join(d, "run", "otel", jobdir.TokenSocket)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Dir(sock), &st); err != nil || st.Mode&0o777 != 0o755 {
		t.Errorf("%s: mode %#o (%v); want 0755 (output_dir_mode)", filepath.Dir(sock), st.Mode&0o7777, err)
	}
	if err := syscall.Lstat(sock, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || int(st.Uid) != uid || st.Mode&0o777 != 0o600 {
		t.Errorf("%s: mode %#o uid %d (%v); want a socket of the job's user (uid %d), 0600", sock, st.Mode, st.Uid, err, uid)
	}
	floods := make(chan result, 1)
	go func() { floods <- runAsNobody(t, 10*time.Minute, nil, "python3 "+flood+" "+sock+" "+d+"/stop") }()
	time.Sleep(time.Second) // the flood's threads running before the first nested submit
	if err := os.WriteFile(d+"/flooding", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, 3*time.Minute, d+"/nested.done")
	// While the job and its supervisor still run: what nobody can read.
	sc := runAsNobody(t, 2*time.Minute, []string{"TOKEN_TO_FIND=" + backendToken}, "python3 "+scan+" "+d+" "+strconv.Itoa(uid))
	if err := os.WriteFile(d+"/stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d+"/scanned", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("nobody's scan: %s", strings.TrimSpace(sc.stdout))
	if sc.code != 0 || strings.Contains(sc.stdout, "found in") || !strings.Contains(sc.stdout, "scanned ") {
		t.Errorf("nobody's scan of the job dir and the job's processes (exit %d):\n%s", sc.code, sc.stdout)
	}
	fr := <-floods
	var f tokenFloodResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(fr.stdout)), &f); err != nil || fr.code != 0 {
		t.Fatalf("nobody's flood: exit %d %v: %s", fr.code, err, fr.stdout)
	}
	t.Logf("nobody: the socket's path: %s; %d connects, %d connected, %d bytes received, errors %v", f.Lstat, f.Tries, f.Connected, f.Received, f.Errors)
	if f.Tries < 100 {
		t.Errorf("nobody's flood made only %d connects", f.Tries)
	}
	if f.Received != 0 || strings.Contains(f.Data, backendToken) {
		t.Errorf("nobody received %d bytes from the job's token socket (the token among them: %v): %.200q", f.Received, strings.Contains(f.Data, backendToken), f.Data)
	}
	// Each nested submit: accepted, in time.
	b, _ := os.ReadFile(d + "/nested")
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != nestedSubmits {
		t.Errorf("%d nested submits, want %d:\n%s", len(lines), nestedSubmits, b)
	}
	var took []string
	for _, l := range lines {
		fs := strings.SplitN(l, " ", 3)
		if len(fs) < 3 {
			t.Errorf("nested submit: %q", l)
			continue
		}
		ms, _ := strconv.Atoi(fs[1])
		took = append(took, fs[1]+" ms")
		if fs[0] != "0" || !strings.Contains(fs[2], "Submitted batch job") {
			t.Errorf("a nested sbatch --gym-otel under the flood was refused (exit %s): %s", fs[0], fs[2])
		} else if time.Duration(ms)*time.Millisecond > nestedBound {
			t.Errorf("a nested sbatch --gym-otel under the flood took %d ms (bound %v)", ms, nestedBound)
		}
	}
	t.Logf("the nested submits under the flood took %s", strings.Join(took, ", "))
	r := <-done
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("the job failed (exit %d): %s\n%s", r.code, r.stderr, out)
	}
	waitNoCollector(t)
	waitIdle(t)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("%s is left after the job (%v)", sock, err)
	}
}

// runAsNobody runs a bash command line as nobody (uid and gid 65534, no
// supplementary groups) in the jobs dir, with env added to a clean
// environment; its output is stdout and stderr together.
func runAsNobody(t *testing.T, timeout time.Duration, env []string, cmdline string) result {
	t.Helper()
	cmd := exec.Command("timeout", strconv.Itoa(int(timeout.Seconds())), "setpriv", "--reuid=65534", "--regid=65534",
		"--clear-groups", "/bin/bash", "-c", "cd "+jobsDir+" && "+cmdline)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "LANG=C.UTF-8"}, env...)
	out, err := cmd.CombinedOutput()
	r := result{stdout: string(out)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", cmdline, err)
	}
	return r
}
