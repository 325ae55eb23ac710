//go:build vmguest

package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
	"github.com/gym-otel-spank/gym-otel-spank/internal/slurmkit"
)

// The test binary also plays the other user's flooding processes (the
// guest has no python3): GOS_GUEST_ROLE=connflood, unixflood or
// finalflood, started by a test as another uid (asRole).
func TestMain(m *testing.M) {
	switch os.Getenv("GOS_GUEST_ROLE") {
	case "connflood":
		connFlood()
		return
	case "unixflood":
		unixFlood()
		return
	case "finalflood":
		finalFlood()
		return
	}
	os.Exit(m.Run())
}

// floodResult is what a flooding role prints: its tries, how many
// connected, and the failures by errno name.
type floodResult struct {
	Tries     int            `json:"tries"`
	Connected int            `json:"connected"`
	Errors    map[string]int `json:"errors"`
}

// flooder counts a flooding role's tries.
type flooder struct {
	mu  sync.Mutex
	res floodResult
}

func (f *flooder) note(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.res.Tries++
	if err == nil {
		f.res.Connected++
		return
	}
	name := "other"
	var errno syscall.Errno
	var ne net.Error
	switch {
	case errors.As(err, &errno):
		name = errnoName(errno)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		// The dialer's deadline passed before a connect was made or
		// answered (a guest under TCG stalls for a second at times).
		name = "timeout"
	}
	f.res.Errors[name]++
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EACCES:
		return "EACCES"
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.ECONNREFUSED:
		return "ECONNREFUSED"
	case syscall.ECONNRESET:
		return "ECONNRESET"
	case syscall.EAGAIN:
		return "EAGAIN"
	}
	return strconv.Itoa(int(e))
}

func (f *flooder) print() {
	b, _ := json.Marshal(f.res)
	fmt.Println(string(b))
}

// stopped reports whether the file GOS_STOP exists, or the role's 10
// minutes are over.
func stopped(end time.Time) bool {
	_, err := os.Stat(os.Getenv("GOS_STOP"))
	return err == nil || time.Now().After(end)
}

// connFlood is the connection exhaustion of the receivers: GOS_CONNS
// workers per port of GOS_PORTS (comma-separated) each connect to
// 127.0.0.1:<port>, and on a connection trickle header lines of 900 bytes
// every 10 ms (the 200 connections of ~900 KiB of headers) until
// it breaks, then connect again, 100 ms after a refusal (a guest under
// TCG has two slow CPUs: the flood is of connections, not of CPU), until
// GOS_STOP exists.
func connFlood() {
	f := &flooder{res: floodResult{Errors: map[string]int{}}}
	n, _ := strconv.Atoi(os.Getenv("GOS_CONNS"))
	end := time.Now().Add(10 * time.Minute)
	line := []byte("X-Fill: " + strings.Repeat("a", 890) + "\r\n")
	var wg sync.WaitGroup
	for _, p := range strings.Split(os.Getenv("GOS_PORTS"), ",") {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stopped(end) {
					c, err := net.DialTimeout("tcp", "127.0.0.1:"+p, 2*time.Second)
					f.note(err)
					if err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					_, err = c.Write([]byte("POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"))
					for err == nil && !stopped(end) {
						_, err = c.Write(line)
						time.Sleep(10 * time.Millisecond)
					}
					c.Close()
				}
			}()
		}
	}
	wg.Wait()
	f.print()
}

// unixFlood is the hold-socket flood: 4 workers connect to the socket at
// GOS_SOCKET, keep a connection they got for 200 ms, close, and again (1
// ms apart after a refusal) until GOS_STOP exists.
func unixFlood() {
	f := &flooder{res: floodResult{Errors: map[string]int{}}}
	end := time.Now().Add(10 * time.Minute)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopped(end) {
				c, err := net.DialTimeout("unix", os.Getenv("GOS_SOCKET"), 5*time.Second)
				f.note(err)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				time.Sleep(200 * time.Millisecond)
				c.Close()
			}
		}()
	}
	wg.Wait()
	f.print()
}

// asRole starts this test binary in role as user (a name or uid; no
// groups but the user's own), with env; its stdout is the role's result.
func asRole(t *testing.T, user, role string, env ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--reuid="+user, "--regid="+user, "--clear-groups", self)
	cmd.Env = append([]string{"GOS_GUEST_ROLE=" + role, "PATH=/usr/bin:/bin"}, env...)
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &out
}

// floodDone waits for a role's end and reads its result.
func floodDone(t *testing.T, who string, cmd *exec.Cmd, out *strings.Builder) floodResult {
	t.Helper()
	err := cmd.Wait()
	var f floodResult
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &f); err != nil || jerr != nil {
		t.Fatalf("%s: the flood: %v %v: %q", who, err, jerr, out.String())
	}
	return f
}

// readAsUID reads path as uid (its gid the same number, no groups).
func readAsUID(path, uid string) ([]byte, error) {
	return exec.Command("setpriv", "--reuid="+uid, "--regid="+uid, "--clear-groups", "cat", path).Output()
}

// userID is the uid of a user of the node.
func userID(t *testing.T, name string) string {
	t.Helper()
	out, err := run("id", "-u", name)
	if err != nil {
		t.Fatalf("id -u %s: %v %s", name, err, out)
	}
	return strings.TrimSpace(out)
}

// runningState reads the job's state.json once the batch script said it
// started (the file start in d).
func runningState(t *testing.T, d string) jobdir.State {
	t.Helper()
	if !waitFor(patience, func() bool { _, err := os.Stat(d + "/started"); return err == nil }) {
		t.Fatalf("the batch script never started\nslurmd:\n%s", tail(slurmd(t), 40))
	}
	var st jobdir.State
	if b, err := os.ReadFile(filepath.Join(d, "run", "otel", "state.json")); err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("state.json: %v %s", err, b)
	}
	return st
}

// runningJobID is the job user's one queued job.
func runningJobID(t *testing.T) string {
	t.Helper()
	out, _ := run("squeue", "-h", "-o", "%i", "-u", jobUser)
	id := strings.TrimSpace(out)
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("the job's id: %q", out)
	}
	return id
}

// cgroupValue is a file of the job's group (a number, "max" as -1).
func cgroupValue(t *testing.T, id, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", groupPath(t, id), file))
	if err != nil {
		t.Fatalf("the job's group: %v", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q", file, s)
	}
	return n
}

// cgroupEvent is one key of the group's memory.events.
func cgroupEvent(t *testing.T, id, key string) int64 {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", groupPath(t, id), "memory.events"))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// TestReceiverFloodOtherUser: connection exhaustion of a running job's
// OTLP receivers by another user (nobody), on cgroup v2 under systemd: 200
// workers per receiver port (OTLP/HTTP and gRPC) connect again and again
// and trickle header lines of 900 bytes on whatever connection they get
// (the 200 connections of ~900 KiB of headers took a collector from
// 12 to 239 MiB, and 2,000 idle gRPC connections exhausted its
// descriptors), while the batch script exports 40 times with its token.
// None of the other user's connections opens (the packet filter resets
// them); the collector's group stays within its memory bound (peak below
// memory.max, no OOM kill), the collector is the same process throughout,
// and every export of the job is answered 200.
func TestReceiverFloodOtherUser(t *testing.T) {
	waitIdle(t)
	d := jobDir(t, "receiverflood")
	const exports = 40
	post := `curl -s -m 10 -o /dev/null -w '%{http_code}\n' -XPOST -H "Authorization: $auth" -H 'Content-Type: application/json' --data '{"resourceSpans":[]}' "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces"`
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf(`#!/bin/bash
auth=${OTEL_EXPORTER_OTLP_HEADERS#Authorization=}; auth=${auth//%%20/ }
touch %[1]s/started
for i in $(seq 1 1800); do [ -e %[1]s/go ] && break; sleep 0.1; done
for i in $(seq 1 %[3]d); do %[2]s >> %[1]s/codes; sleep 0.25; done
touch %[1]s/exported
for i in $(seq 1 1800); do [ -e %[1]s/finish ] && break; sleep 0.1; done
true
`, d, post, exports))
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 2*patience, fmt.Sprintf("sbatch --wait -n1 --mem=300M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	}()
	finish := func() { _ = os.WriteFile(d+"/finish", nil, 0o644) }
	defer finish()
	st := runningState(t, d)
	id := runningJobID(t)
	before := cgroupValue(t, id, "memory.current")
	bound := cgroupValue(t, id, "memory.max")
	stop := filepath.Join(d, "stop-flood")
	defer os.WriteFile(stop, nil, 0o644)
	ports := fmt.Sprintf("%d,%d", st.Ports.OTLPHTTP, st.Ports.OTLPGRPC)
	cmd, out := asRole(t, other, "connflood", "GOS_PORTS="+ports, "GOS_CONNS=200", "GOS_STOP="+stop)
	time.Sleep(3 * time.Second) // the flood under way before the first export
	if err := os.WriteFile(d+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var peakSeen int64
	if !waitFor(patience, func() bool {
		peakSeen = max(peakSeen, cgroupValue(t, id, "memory.current"))
		_, err := os.Stat(d + "/exported")
		return err == nil
	}) {
		t.Fatalf("the batch script's exports did not end")
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := floodDone(t, "nobody", cmd, out)
	peak := cgroupValue(t, id, "memory.peak")
	ooms := cgroupEvent(t, id, "oom_kill")
	var after jobdir.State
	if b, err := os.ReadFile(filepath.Join(d, "run", "otel", "state.json")); err != nil || json.Unmarshal(b, &after) != nil {
		t.Fatalf("state.json: %v %s", err, b)
	}
	finish()
	r := <-done
	codes, _ := os.ReadFile(d + "/codes")
	t.Logf("job %s, ports %s: the other user tried %d connections, %d opened (errors %v); the collector's group: %.1f MiB before, %.1f MiB at most while flooded (peak since its start %.1f MiB), bound %.1f MiB, %d OOM kills; the job's exports: %q",
		id, ports, f.Tries, f.Connected, f.Errors, mib(before), mib(peakSeen), mib(peak), mib(bound), ooms, strings.Join(strings.Fields(string(codes)), " "))
	if r.code != 0 {
		jo, _ := os.ReadFile(d + "/job.out")
		t.Errorf("the job failed (exit %d): %s\n%s", r.code, r.stderr, jo)
	}
	if f.Tries < 400 || f.Connected != 0 {
		t.Errorf("the other user: %d tries, %d connections opened; want at least 400 tries and none opened", f.Tries, f.Connected)
	}
	if got := strings.Fields(string(codes)); len(got) != exports || strings.Count(string(codes), "200\n") != exports {
		t.Errorf("the job's exports during the flood: %q, want %d times 200", got, exports)
	}
	if bound <= 0 || peak >= bound || ooms != 0 {
		t.Errorf("the collector's group: peak %.1f MiB, bound %.1f MiB, %d OOM kills; want within its bound, none killed", mib(peak), mib(bound), ooms)
	}
	if after.CollectorPID != st.CollectorPID || after.Restarts != st.Restarts {
		t.Errorf("the collector: pid %d, %d restarts before the flood; pid %d, %d restarts after", st.CollectorPID, st.Restarts, after.CollectorPID, after.Restarts)
	}
	waitNoCollector(t)
	waitIdle(t)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// TestControlSocketFloodOtherUser: while a job of 8 steps runs on cgroup v2
// under systemd, another user (nobody) and the job's own user each loop
// connect and close on its control socket in 4 workers, keeping each
// connection they get for 200 ms, from before the first step to after the
// job's end (the path from root's record; /proc/net/unix shows it to all).
// Neither ever connects: every try fails with EACCES (the socket's dir is
// root's, 0700), or ENOENT once the epilog removed the record dir (or, at
// most once in 100 tries, the dialer's 5 s deadline passes before the
// connect is made: a guest under TCG stalls at times). Root's
// exchanges are all answered: every step (the 8 and the batch step) has its
// slurm.step span, and the final-scrape wait ends once the supervisor says
// the samples are in, well before its bound.
func TestControlSocketFloodOtherUser(t *testing.T) {
	waitIdle(t)
	d := jobDir(t, "controlflood")
	const steps = 8
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf(`#!/bin/bash
touch %[1]s/started
for i in $(seq 1 1800); do [ -e %[1]s/flooding ] && break; sleep 0.1; done
for i in $(seq 1 %[2]d); do srun -n1 true || exit 5; done
`, d, steps))
	r := asUser(t, patience, fmt.Sprintf("sbatch -n1 --mem=200M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	job := jobIDOf(t, r)
	stop := filepath.Join(d, "stop-flood")
	defer os.WriteFile(stop, nil, 0o644)
	defer os.WriteFile(d+"/flooding", nil, 0o644)
	runningState(t, d)
	recDir := envOr("GYM_VM_RECORD_DIR", contract.DefaultRecordDir)
	jid, _ := strconv.ParseUint(job, 10, 32)
	var rec *record.Record
	if !waitFor(patience, func() bool {
		var err error
		rec, err = record.Read(record.JobDir(recDir, node, uint32(jid)))
		return err == nil && rec.Status == record.StatusReady && rec.ControlSocket != ""
	}) {
		t.Fatalf("job %s: no ready record with a control socket in %s", job, recDir)
	}
	var sock, dir syscall.Stat_t
	if err := syscall.Lstat(rec.ControlSocket, &sock); err != nil || sock.Mode&syscall.S_IFMT != syscall.S_IFSOCK || sock.Uid != 0 || sock.Mode&0o777 != 0o600 {
		t.Errorf("%s: mode %#o uid %d (%v); want a socket of root's, 0600", rec.ControlSocket, sock.Mode, sock.Uid, err)
	}
	if err := syscall.Lstat(filepath.Dir(rec.ControlSocket), &dir); err != nil || dir.Uid != 0 || dir.Mode&0o777 != 0o700 {
		t.Errorf("%s: mode %#o uid %d (%v); want a dir of root's, 0700", filepath.Dir(rec.ControlSocket), dir.Mode, dir.Uid, err)
	}
	env := []string{"GOS_SOCKET=" + rec.ControlSocket, "GOS_STOP=" + stop}
	who := map[string]string{"nobody": other, jobUser: userID(t, jobUser)}
	type flood struct {
		cmd *exec.Cmd
		out *strings.Builder
	}
	floods := map[string]flood{}
	for name, uid := range who {
		cmd, out := asRole(t, uid, "unixflood", env...)
		floods[name] = flood{cmd, out}
	}
	time.Sleep(time.Second) // both floods under way before the first step
	if err := os.WriteFile(d+"/flooding", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitJobsGone(t, []string{job})
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, fl := range floods {
		f := floodDone(t, name, fl.cmd, fl.out)
		t.Logf("%s: %d connects, %d connected, errors %v", name, f.Tries, f.Connected, f.Errors)
		// A timeout is a connect the dialer's deadline overtook (the
		// guest stalled), never one that got through: at most 1 in 100.
		if f.Errors["EACCES"] < 100 || f.Connected != 0 || f.Errors["EACCES"]+f.Errors["ENOENT"]+f.Errors["timeout"] != f.Tries || f.Errors["timeout"]*100 > f.Tries {
			t.Errorf("%s: %d connects, %d connected, errors %v; want at least 100, every one refused with EACCES (ENOENT once the record is gone; a timeout at most once in 100)", name, f.Tries, f.Connected, f.Errors)
		}
	}
	waitNoCollector(t)
	seen := map[string]bool{}
	for _, s := range slurmkit.PhaseSpans(t, filepath.Join(d, "run", "otel")) {
		if s.Name == vocab.SpanStep {
			seen[s.Attrs[vocab.AttrStepID]] = true
		}
	}
	var missing []string
	for i := -1; i < steps; i++ {
		id := strconv.Itoa(i)
		if i < 0 {
			id = "batch"
		}
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("steps without a span in traces.jsonl: %v (spans of %v)", missing, seen)
	}
	log := slurmd(t)
	early := regexp.MustCompile(`job ` + job + `: (?:no scrape target on|every target on) ` + node + `[^\n]*: final-scrape wait ended after (\d+) ms`).FindStringSubmatch(log)
	switch {
	case strings.Contains(log, "job "+job+": the supervisor on "+node+" did not take the final-scrape request"):
		t.Errorf("job %s: the supervisor did not take the final-scrape request", job)
	case early == nil:
		t.Errorf("job %s: the final-scrape wait did not end early (%q)", job,
			regexp.MustCompile(`job `+job+`: final-scrape wait [^\n]*`).FindString(log))
	default:
		ms, _ := strconv.Atoi(early[1])
		t.Logf("job %s: the final-scrape wait ended after %d ms (its bound: one scrape interval + 1 s)", job, ms)
	}
	waitIdle(t)
}

// forgedTrace is the trace id of the spans the job's task forges.
const forgedTrace = "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f"

// TestForgedPhaseSpansGuest: a task of the job posts spans that look like
// the plugin's Slurm phases (the phase scope, service.name slurm, the
// plugin's mark gym_otel.source=slurm itself, slurm.job, slurm.prolog and
// a slurm.step of step 0 lasting a minute) to the job's collector with the
// receiver token of its task environment. The collector takes them (200)
// and writes them without the mark; inspect does not show them as Slurm's
// (its phases are the plugin's own, step 0 as long as it ran) and counts 3
// lookalikes sent by the job; the real phases are all there, marked.
func TestForgedPhaseSpansGuest(t *testing.T) {
	waitIdle(t)
	d := jobDir(t, "forged")
	now := time.Now().UnixNano()
	span := func(id, name, attrs string) string {
		return fmt.Sprintf(`{"traceId":%q,"spanId":%q,"name":%q,"kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[{"key":"slurm.node","value":{"stringValue":"%s"}}%s]}`,
			forgedTrace, id, name, now-120e9, now-60e9, node, attrs)
	}
	body := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"slurm"}},` +
		`{"key":"host.name","value":{"stringValue":"` + node + `"}},{"key":"` + contract.SourceKey + `","value":{"stringValue":"` + contract.SourceSlurm + `"}}]},` +
		`"scopeSpans":[{"scope":{"name":"` + contract.PhaseScope + `"},"spans":[` +
		span("f000000000000001", vocab.SpanJob, "") + "," +
		span("f000000000000002", vocab.SpanProlog, `,{"key":"slurm.start_known","value":{"boolValue":true}}`) + "," +
		span("f000000000000003", vocab.SpanStep, `,{"key":"slurm.step.id","value":{"stringValue":"0"}}`) + `]}]}]}`
	if err := os.WriteFile(filepath.Join(d, "forged.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf(`#!/bin/bash
h=${OTEL_EXPORTER_OTLP_HEADERS#Authorization=}
h=${h//%%20/ }
code=$(curl -s -m 10 -o /dev/null -w '%%{http_code}' -XPOST -H 'Content-Type: application/json' -H "Authorization: $h" --data @%[1]s/forged.json "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces")
echo "forged=$code"
srun -n1 true
echo done
`, d))
	r := asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=200M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	out, _ := os.ReadFile(filepath.Join(d, "job.out"))
	if r.code != 0 {
		t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, out)
	}
	if !strings.Contains(string(out), "forged=200") {
		t.Fatalf("the task's post of the lookalike spans was not taken (want 200 with the task's token):\n%s", out)
	}
	job := jobIDOf(t, r)
	waitNoCollector(t)
	var real []slurmkit.PhaseSpan
	forged := 0
	for _, s := range slurmkit.PhaseSpans(t, filepath.Join(d, "run", "otel")) {
		if s.Trace != forgedTrace {
			real = append(real, s)
			continue
		}
		forged++
		if _, ok := s.Resource[contract.SourceKey]; ok {
			t.Errorf("the task's %s span arrived with %s: %v", s.Name, contract.SourceKey, s.Resource)
		}
	}
	if forged != 3 {
		t.Errorf("%d of the task's 3 lookalike spans in traces.jsonl", forged)
	}
	slurmkit.CheckNodePhases(t, real, slurmkit.NodePhases{Node: node,
		Identity: map[string]string{"slurm_job_id": job}, Steps: map[string]int{"0": 0}, Batch: true})
	cli := envOr("GYM_VM_CLI", "/usr/bin/gym-otel-spank")
	js, err := exec.Command(cli, "inspect", "--json", filepath.Join(d, "run")).Output()
	if err != nil {
		t.Fatalf("inspect --json: %v", err)
	}
	var rep inspect.Report
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	text, err := exec.Command(cli, "inspect", filepath.Join(d, "run")).CombinedOutput()
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, text)
	}
	t.Logf("inspect:\n%s", text)
	if rep.JobLookalikes.PhaseSpans != 3 {
		t.Errorf("inspect --json: job_lookalikes %+v, want 3 phase spans", rep.JobLookalikes)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(text)), " "),
		"3 spans looked like the plugin's Slurm phases but were sent by the job and are not counted as Slurm's") {
		t.Errorf("inspect's text does not say the 3 spans were the job's")
	}
	if len(rep.Phases) != 1 {
		t.Fatalf("inspect: phases of %d runs, want the job's one: %+v", len(rep.Phases), rep.Phases)
	}
	np := rep.Phases[0]
	if np.TraceID == forgedTrace || np.JobID != job {
		t.Errorf("inspect's phases: trace %s job %s, want the plugin's of job %s", np.TraceID, np.JobID, job)
	}
	got := map[string]int{}
	for _, p := range np.Phases {
		got[p.Name+"/"+p.Step]++
		if p.Name == vocab.SpanStep && p.Step == "0" && p.DurationSeconds.Known() && float64(p.DurationSeconds) > 30 {
			t.Errorf("step 0 lasted %v s in inspect: the task's lookalike (60 s) taken for Slurm's", float64(p.DurationSeconds))
		}
	}
	for _, want := range []string{"slurm.job/", "slurm.prolog/", "slurm.step/0", "slurm.step/batch", "slurm.batch_script/", "slurm.final_wait/", "slurm.epilog/", "slurm.drain/"} {
		if got[want] != 1 {
			t.Errorf("inspect's phases: %d of %s, want 1 (all: %v)", got[want], want, got)
		}
	}
	t.Logf("job %s: %d real phase spans, %d lookalikes the task sent", job, len(real), forged)
	waitIdle(t)
}
