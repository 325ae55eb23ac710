package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildSquat compiles the port squatter (testdata/squat.c) into dir.
func buildSquat(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "squat")
	if out, err := run("gcc", "-O2", "-Wall", "-o", bin, filepath.Join(root, "tests/plugin/testdata/squat.c")); err != nil {
		t.Fatalf("building the squatter: %v\n%s", err, out)
	}
	return bin
}

// squatAfterKill stops the job's supervisor, kills its collector and has
// another user (nobody) bind every one of ports as soon as it is free
// (squat, buildSquat's listener, logging what it receives to the returned
// file); it returns once all are bound, with the supervisor still stopped:
// resume lets it go on (also at the test's end).
func squatAfterKill(t *testing.T, d, squat string, sup, collector int, ports []int) (logf string, resume func()) {
	t.Helper()
	if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume = func() {
		if !resumed {
			resumed = true
			syscall.Kill(sup, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	if err := syscall.Kill(collector, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	logf = filepath.Join(d, "squat.log")
	if err := os.WriteFile(logf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(logf, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	argv := []string{"--reuid=65534", "--regid=65534", "--clear-groups", squat, logf, d + "/squat.ready"}
	for _, p := range ports {
		argv = append(argv, strconv.Itoa(p))
	}
	sq := exec.Command("setpriv", argv...)
	if err := sq.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Process.Kill(); sq.Wait() })
	waitFile(t, 40*time.Second, d+"/squat.ready")
	return logf, resume
}

// supervisorState is what the tests read of a job's state.json.
type supervisorState struct {
	Status        string `json:"status"`
	SupervisorPID int    `json:"supervisor_pid"`
	CollectorPID  int    `json:"collector_pid"`
	Restarts      int    `json:"restarts"`
	Ports         struct {
		OTLPGRPC  int `json:"otlp_grpc"`
		OTLPHTTP  int `json:"otlp_http"`
		Health    int `json:"health"`
		Telemetry int `json:"telemetry"`
	} `json:"ports"`
}

func readState(t *testing.T, path string) supervisorState {
	t.Helper()
	var st supervisorState
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("state.json %s: %v %s", path, err, b)
	}
	return st
}

// TestPortsTakenAfterRestart: another local user (nobody) waits to bind the
// ports of a job's collector. The collector is killed mid-job (its
// supervisor held stopped meanwhile, so that the squatter surely wins the
// race for the freed ports); the squatter binds all four and answers every
// request with 200, the health check included. The supervisor, resumed,
// restarts the collector, proves the ports again, finds them another
// user's, and gives up. A later step of the job then gets no collector env
// (the batch script's inherited values are taken out too), so nothing the
// job sends reaches the squatter: no request with the receiver token, no
// telemetry. The job itself completes (on_failure=continue) and the node
// stays idle.
func TestPortsTakenAfterRestart(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "squat")
	squat := buildSquat(t, d)
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
touch %[1]s/ready
for i in $(seq 1 900); do [ -e %[1]s/go ] && break; sleep 0.1; done
[ -e %[1]s/go ] || exit 4
srun -N1 -n1 bash -c 'env | grep -E "^(OTEL_|NEMO_GYM_OTEL_|GYM_OTEL_)" > %[1]s/step.env
if [ -n "$OTEL_EXPORTER_OTLP_ENDPOINT" ]; then
  curl -s -m 5 -XPOST -H "X-Sent-Headers: $OTEL_EXPORTER_OTLP_HEADERS" --data probe "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces" >/dev/null
fi
true'
`, d))
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 180*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 --wait --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	}()
	waitFile(t, 60*time.Second, d+"/ready")
	state := filepath.Join(d, "run", "otel", "state.json")
	st := readState(t, state)
	if st.Status != "ready" || st.SupervisorPID == 0 || st.CollectorPID == 0 {
		t.Fatalf("state.json: %+v", st)
	}
	sup := st.SupervisorPID
	ports := []int{st.Ports.OTLPGRPC, st.Ports.OTLPHTTP, st.Ports.Health, st.Ports.Telemetry}
	logf, resume := squatAfterKill(t, d, squat, sup, st.CollectorPID, ports)
	resume()

	// The supervisor must not stay ready on the squatter's ports.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", sup)); err != nil {
			break // exited (the supervisor's parent reaps it)
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", sup)); err == nil && strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(state)
			t.Errorf("the supervisor still runs 60 s after its ports were taken; state.json %s", b)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(d+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	out, _ := os.ReadFile(d + "/job.out")
	if r.code != 0 {
		t.Fatalf("the job failed (exit %d): %s\n%s", r.code, r.stderr, out)
	}
	got, _ := os.ReadFile(logf)
	if strings.Contains(string(got), "gos_") || strings.Contains(string(got), "POST") {
		t.Errorf("the squatter received the job's requests or its receiver token:\n%s", got)
	}
	env, err := os.ReadFile(d + "/step.env")
	if err != nil {
		t.Fatalf("the later step wrote no env: %v\n%s", err, out)
	}
	for _, p := range ports {
		if strings.Contains(string(env), ":"+strconv.Itoa(p)) {
			t.Errorf("a later step's env still points at port %d:\n%s", p, env)
		}
	}
	if strings.Contains(string(env), "OTEL_EXPORTER_OTLP_HEADERS") {
		t.Errorf("a later step still carries the receiver token header:\n%s", env)
	}
	if final := readState(t, state); final.Status != "failed" {
		t.Errorf("state.json status %q after the ports were taken, want failed", final.Status)
	}
	if !strings.Contains(string(out), "stopped mid-job") {
		t.Errorf("the job's output does not say the collector stopped mid-job:\n%s", out)
	}
	if logs := slurmdLogs(t); !strings.Contains(logs, "stopped mid-job") {
		t.Errorf("slurmd's log does not say the collector stopped mid-job")
	}
	t.Logf("squatter received %d bytes (health checks only); later step env:\n%s", len(got), env)
	waitNoCollector(t)
	waitIdle(t)
}

// otherUser is a second unprivileged local user (made like the harness's
// user when missing): the victim of another user's job.
func otherUser(t *testing.T) string {
	t.Helper()
	name := slurmEnv["GOS_SLURM_USER"] + "b"
	if _, err := run("getent", "passwd", name); err == nil {
		return name
	}
	uid, _ := strconv.Atoi(os.Getenv("GOS_SLURM_UID"))
	if uid == 0 {
		uid = 2001
	}
	if out, err := run("useradd", "-u", strconv.Itoa(uid+1), "-U", "-m", "-d", "/home/"+name, "-s", "/bin/bash", name); err != nil {
		t.Fatalf("useradd %s: %v %s", name, err, out)
	}
	return name
}

// asOther runs a bash command line as user in the jobs dir (as asUser).
func asOther(t *testing.T, user string, timeout time.Duration, env []string, cmdline string) result {
	t.Helper()
	cmd := exec.Command("timeout", fmt.Sprint(int(timeout.Seconds())), "setpriv", "--reuid="+user, "--regid="+user,
		"--init-groups", "/bin/bash", "-c", "cd "+jobsDir+" && "+cmdline)
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "SLURM_CONF=" + os.Getenv("SLURM_CONF"),
		"HOME=/home/" + user, "USER=" + user, "LOGNAME=" + user, "LANG=C.UTF-8"}, env...)
	out, err := cmd.CombinedOutput()
	r := result{stdout: string(out)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", cmdline, err)
	}
	return r
}

// TestRecordDirFullOfNothing: root's record dir is a small file system of
// its own (a 256 KiB tmpfs, like a crowded /run). A job with a collector
// tries, as its user, to write into every path of its own record dir it
// knows of (the dirs cannot be listed) until the file system is full.
// Every write fails: nothing there is the user's (checked as root too,
// while the job runs). Meanwhile another user's job starts on the same
// node and gets its record and its collector env.
func TestRecordDirFullOfNothing(t *testing.T) {
	waitIdle(t)
	if err := os.MkdirAll(recordDir, 0o711); err != nil {
		t.Fatal(err)
	}
	if out, err := run("mount", "-t", "tmpfs", "-o", "size=256k,mode=0711", "gym-otel-records", recordDir); err != nil {
		t.Skipf("no tmpfs for the record dir: %v %s", err, out)
	}
	t.Cleanup(func() {
		waitIdle(t)
		if out, err := run("umount", recordDir); err != nil {
			t.Errorf("umount %s: %v %s", recordDir, err, out)
		}
	})
	victim := otherUser(t)
	d := markerDir(t, "fill")
	// The attack: every name of the job's record dir, and new files in
	// each of its dirs, written with as much as the file system takes.
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
R=%[2]s
J=$R/gn1/$SLURM_JOB_ID
for p in $R/fill $R/gn1/fill $J/fill $J/record $J/sampled $J/warned $J/.record.x; do
  out=$(dd if=/dev/zero of=$p bs=64k count=64 2>&1)
  case "$out" in *"failed to open"*) echo "refused $p";; *) echo "wrote $p: $out";; esac
done > %[1]s/attack.log 2>&1
touch %[1]s/attacked
for i in $(seq 1 900); do [ -e %[1]s/go ] && break; sleep 0.1; done
`, d, recordDir))
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 180*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 -w gn1 --wait --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	}()
	defer os.WriteFile(d+"/go", nil, 0o644)
	waitFile(t, 90*time.Second, d+"/attacked")
	attack, _ := os.ReadFile(d + "/attack.log")
	if strings.Contains(string(attack), "wrote") || strings.Count(string(attack), "refused") != 7 {
		t.Errorf("the job wrote into root's record dir:\n%s", attack)
	}
	t.Logf("the attack:\n%s", attack)
	// As root: nothing in the record dirs is another uid's or writable by others.
	if out, err := run("find", recordDir, "(", "!", "-uid", "0", "-o", "-perm", "/022", ")", "-printf", "%u %m %p\n"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("paths in root's record dir that are not root's only (%v):\n%s", err, out)
	}
	out, _ := run("df", "-k", recordDir)
	t.Logf("record dir while the job runs:\n%s", out)

	// The other user's job on the same node gets its record and its env.
	vd := filepath.Join(d, "victim")
	if err := os.Mkdir(vd, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(vd, 0o777)
	vscript := filepath.Join(vd, "job.sh")
	if err := os.WriteFile(vscript, []byte("#!/bin/bash\nenv | grep -E '^OTEL_EXPORTER_OTLP_(ENDPOINT|HEADERS)=' | cut -c1-48 > "+vd+"/env\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := asOther(t, victim, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 -w gn1 --wait --gym-otel=job_dir=%s/run -o %s/job.out %s", vd, vd, vscript))
	vout, _ := os.ReadFile(vd + "/job.out")
	if r.code != 0 {
		t.Fatalf("the other user's job failed (exit %d): %s\n%s", r.code, r.stdout, vout)
	}
	env, _ := os.ReadFile(vd + "/env")
	if !strings.Contains(string(env), "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:") || !strings.Contains(string(env), "OTEL_EXPORTER_OTLP_HEADERS=") {
		t.Errorf("the other user's job got no collector env:\n%s\n%s", env, vout)
	}
	os.WriteFile(d+"/go", nil, 0o644)
	if r := <-done; r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("the attacking job failed (exit %d): %s\n%s", r.code, r.stderr, out)
	}
	waitNoCollector(t)
}
