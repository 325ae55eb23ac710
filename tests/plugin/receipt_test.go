package plugin_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/receipt"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// items counts the spans, metric data points and log records of OTLP-JSON
// lines; with job set, only of resources whose slurm_job_id is job.
type items struct{ spans, points, logs int }

func countItems(t *testing.T, path, job string) items {
	t.Helper()
	n, err := readItems(path, job)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readItems is countItems' count, or otlptest.Read's error.
func readItems(path, job string) (items, error) {
	var n items
	d, err := otlptest.Read(path)
	if err != nil {
		return n, err
	}
	ours := func(r otlptest.Attrs) bool {
		if job == "" {
			return true
		}
		id, _ := r.Str("slurm_job_id")
		return id == job
	}
	for _, s := range d.Spans {
		if ours(s.Resource) {
			n.spans++
		}
	}
	for _, m := range d.Metrics {
		if ours(m.Resource) {
			n.points += m.Points()
		}
	}
	for _, l := range d.Logs {
		if ours(l.Resource) {
			n.logs++
		}
	}
	return n, nil
}

// backendItems is dirItems of the test backend's files. The backend's file
// exporter may be writing a line while they are read: a file read with its
// last line not yet terminated is read again, for at most 5 s.
func backendItems(t *testing.T, job string) items {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n items
		var err error
		for _, f := range []string{"traces.jsonl", "metrics.jsonl", "logs.jsonl"} {
			var c items
			if c, err = readItems(filepath.Join(backendDir, f), job); err != nil {
				break
			}
			n.spans, n.points, n.logs = n.spans+c.spans, n.points+c.points, n.logs+c.logs
		}
		if err == nil {
			return n
		}
		if !strings.Contains(err.Error(), "partial write") || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dirItems(t *testing.T, dir, job string) items {
	return items{
		spans:  countItems(t, filepath.Join(dir, "traces.jsonl"), job).spans,
		points: countItems(t, filepath.Join(dir, "metrics.jsonl"), job).points,
		logs:   countItems(t, filepath.Join(dir, "logs.jsonl"), job).logs,
	}
}

// receiptJob runs a one-node sbatch job that sends 3 rollouts of Gym
// telemetry, with extra SPEC items, and returns its job id and otel dir.
func receiptJob(t *testing.T, name, spec string) (string, string) {
	t.Helper()
	gym := testenv.Standin(t, "gym-standin")
	if out, err := run("install", "-m", "0755", gym, filepath.Join(plugDir, "gym-standin")); err != nil {
		t.Fatalf("install: %v %s", err, out)
	}
	tag := name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	jobDir := filepath.Join(jobsDir, "otel-"+tag)
	script := writeScript(t, tag+".sh", fmt.Sprintf("%s/gym-standin --rollouts 3 || exit 9\n", plugDir))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch --wait --gym-otel=job_dir=%s%s -o %s.out %s", jobDir, spec, filepath.Join(jobsDir, tag), script))
	if r.code != 0 {
		out, _ := os.ReadFile(filepath.Join(jobsDir, tag+".out"))
		t.Fatalf("sbatch: exit %d %s\n%s", r.code, r.stderr, out)
	}
	id := jobIDOf(t, r)
	waitNoCollector(t)
	return id, filepath.Join(jobDir, "otel")
}

// appendedSpans is the spans the receipt lists as appended to traces.jsonl
// after the collector's exit (the drain's and the epilog's): two on a
// node whose epilog told its start (their span metrics, appended to
// metrics.jsonl, are rc.AppendedPoints()).
func appendedSpans(t *testing.T, rc *receipt.Receipt) int {
	t.Helper()
	n := int(rc.AppendedSpans())
	if n != 2 {
		t.Errorf("the receipt lists %d appended spans (%+v), want the drain's and the epilog's", n, rc.Appended)
	}
	return n
}

// waitBackend waits until the suite's backend holds want items of job.
func waitBackend(t *testing.T, job string, want items) items {
	t.Helper()
	var got items
	deadline := time.Now().Add(patience)
	for time.Now().Before(deadline) {
		if got = backendItems(t, job); got == want {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
	return got
}

// TestReceiptCollectorNormalJob: a job with otel.delivery=collector (the
// collector's own exporter sends) whose backend is up. Its receipt has
// final figures, and per signal written = sent = the file's items = the
// items of this job the backend holds. (The default, delivery from the
// files: TestFileDeliveryNormalJob.)
func TestReceiptCollectorNormalJob(t *testing.T) {
	waitIdle(t)
	id, otel := receiptJob(t, "rcpt", ",delivery=collector")
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	if fi, err := os.Stat(filepath.Join(otel, receipt.FileName)); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o644 {
		t.Errorf("receipt.json mode %v, want 0644", fi.Mode().Perm())
	}
	if !rc.Complete() || rc.Trouble() || rc.JobID != id || rc.Collectors != 1 {
		t.Errorf("receipt %+v: want final figures of job %s without trouble", rc, id)
	}
	// The drain's and the epilog's spans are appended after the
	// collector's exit (the receipt lists them): not the collector's to
	// count; the supervisor delivers them to the backend itself, so the
	// backend holds everything the files hold.
	files := dirItems(t, otel, "")
	be := waitBackend(t, id, files)
	if be != files {
		t.Errorf("the backend holds %+v of job %s, the files %+v", be, id, files)
	}
	for _, a := range rc.Appended {
		if !a.Delivered || a.Cause != "" || a.HTTPStatus != 0 {
			t.Errorf("appended line %+v: want delivered by the supervisor", a)
		}
	}
	files.spans -= appendedSpans(t, rc)
	be.spans -= appendedSpans(t, rc)
	// Their span metrics, appended to metrics.jsonl with them.
	files.points -= int(rc.AppendedPoints())
	be.points -= int(rc.AppendedPoints())
	for sig, n := range map[string][2]int{"traces": {files.spans, be.spans}, "metrics": {files.points, be.points}, "logs": {files.logs, be.logs}} {
		c := rc.Signals[sig]
		if c.Written != int64(n[0]) || c.Sent != c.Written || c.Sent != int64(n[1]) || c.Lost() != 0 {
			t.Errorf("receipt %s %+v: want written = sent = %d (the file) = %d (the backend, this job)", sig, c, n[0], n[1])
		}
	}
	if files.spans == 0 || files.logs == 0 || files.points == 0 {
		t.Errorf("the job's files hold %+v; want every signal", files)
	}
	waitIdle(t)
}

// TestReceiptCollectorBackendDownThenReplay: a job with
// otel.delivery=collector whose backend is down (its endpoint a port
// nothing listens on; the default delivery from the files:
// TestFileDeliveryBackendDownThenReplay). Its receipt says the backend got
// none of it, and inspect's first lines say so. Then the job's user runs
// `gym-otel-spank replay --endpoint` to the suite's backend, with the token
// in OTEL_TOKEN as at submit: the backend then holds, for this job, every
// span, metric point and log record of the files.
func TestReceiptCollectorBackendDownThenReplay(t *testing.T) {
	waitIdle(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().(*net.TCPAddr).Port
	l.Close()
	id, otel := receiptJob(t, "down", fmt.Sprintf(",endpoint=http://127.0.0.1:%d,delivery=collector", dead))
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	files := dirItems(t, otel, "")
	for sig, n := range map[string]int{"traces": files.spans - appendedSpans(t, rc), "metrics": files.points - int(rc.AppendedPoints()), "logs": files.logs} {
		c := rc.Signals[sig]
		if c.Written != int64(n) || c.Sent != 0 || c.Lost() != c.Written {
			t.Errorf("receipt %s %+v: want written = failed = %d (the file), sent 0", sig, c, n)
		}
	}
	// The supervisor's delivery of the appended line failed too, and says
	// why.
	for _, a := range rc.Appended {
		if a.Delivered || !strings.Contains(a.Cause, "cannot be reached") {
			t.Errorf("appended line %+v: want not delivered, the backend unreachable", a)
		}
	}
	r := asUser(t, 30*time.Second, nil, fmt.Sprintf("%s/gym-otel-spank inspect %s", plugDir, otel))
	first := strings.Join(strings.SplitN(r.stdout, "\n", 10), "\n")
	if !strings.Contains(first, "LOST: the backend did not get") || !strings.Contains(first, "replay") {
		t.Errorf("inspect's first lines do not say the backend lost data:\n%s", first)
	}
	if got := backendItems(t, id); got != (items{}) {
		t.Fatalf("the backend already holds %+v of job %s", got, id)
	}

	r = asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("%s/gym-otel-spank replay --binary %s --site %s/site.yaml --endpoint http://127.0.0.1:%s %s",
		plugDir, testenv.Collector(t), plugDir, backendPort, filepath.Dir(otel)))
	t.Logf("replay (as %s): exit %d\n%s%s", slurmEnv["GOS_SLURM_USER"], r.code, r.stdout, r.stderr)
	if r.code != 0 || !strings.Contains(r.stdout, "replay complete") {
		t.Fatalf("replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := waitBackend(t, id, files); got != files {
		t.Errorf("the backend holds %+v of job %s after the replay; the files hold %+v", got, id, files)
	}
	waitIdle(t)
}

// TestReceiptCollectorHungBackend: a job with otel.delivery=collector whose
// backend accepts connections and never answers (the hung-backend
// stand-in; the default delivery from the files: TestFileDeliveryHungBackend). The supervisor's delivery of
// the line it appends after the collector's exit costs at most its 2 s
// bound (or the exporter's shorter timeout): the receipt says the line was
// not delivered, and why; the
// epilog waited for the supervisor's own end (it was not cut short) and
// ended within its deadline.
func TestReceiptCollectorHungBackend(t *testing.T) {
	waitIdle(t)
	port := startHungBackend(t)
	id, otel := receiptJob(t, "hung", fmt.Sprintf(",endpoint=http://127.0.0.1:%d,delivery=collector", port))
	rc, err := receipt.Read(otel)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("receipt:\n%s", strings.Join(rc.Summary(), "\n"))
	// The exporter's own timeout (export_timeout_seconds, 1 s on the test
	// cluster) ends the request when it is shorter than the bound.
	if len(rc.Appended) != 2 {
		t.Errorf("appended %+v: want the spans' line and their span metrics' line", rc.Appended)
	}
	for _, a := range rc.Appended {
		if a.Delivered || a.HTTPStatus != 0 ||
			!(strings.Contains(a.Cause, "no answer from the backend within 2s") || strings.Contains(a.Cause, "no answer from the backend within 1s (the request's timeout)")) {
			t.Errorf("appended %+v: want not delivered: no answer in time", a)
		}
	}
	sup, _ := os.ReadFile(filepath.Join(otel, "supervisor.log"))
	m := regexp.MustCompile(`attempt of (\d+) ms \(bound ([^)]+)\)`).FindStringSubmatch(string(sup))
	if m == nil {
		t.Fatalf("no delivery attempt in supervisor.log:\n%s", sup)
	}
	ms, _ := strconv.Atoi(m[1])
	t.Logf("the delivery to the hung backend: %d ms (bound %s)", ms, m[2])
	if bound, err := time.ParseDuration(m[2]); err != nil || time.Duration(ms)*time.Millisecond > bound+500*time.Millisecond {
		t.Errorf("the delivery took %d ms, its bound %s", ms, m[2])
	}
	checkEpilogWaited(t, id)
	waitIdle(t)
}

// startHungBackend starts the hung-backend stand-in (accepts connections,
// never answers) on a free port and returns the port.
func startHungBackend(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	bh := exec.Command(testenv.Standin(t, "blackhole"), "--port", strconv.Itoa(port), "--mode", "hang")
	if err := bh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bh.Process.Signal(syscall.SIGTERM); _ = bh.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hung backend never listened")
		}
	}
	return port
}

// checkEpilogWaited asserts that job id's epilog waited for the
// supervisor's own end (it did not cut the drain short) and ended within
// its deadline, from slurmd's log.
func checkEpilogWaited(t *testing.T, id string) {
	t.Helper()
	var log string
	var e []string
	for deadline := time.Now().Add(30 * time.Second); e == nil && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		log = slurmdLogs(t)
		e = regexp.MustCompile(`job ` + id + `: epilog done in (\d+) ms of its (\S+) deadline`).FindStringSubmatch(log)
	}
	if e == nil {
		t.Fatalf("no epilog line for job %s in slurmd's log", id)
	}
	t.Logf("job %s: the epilog took %s ms of its %s deadline", id, e[1], e[2])
	if strings.Contains(log, "job "+id+": supervisor") && regexp.MustCompile(`job `+id+`: (the supervisor's drain gets|supervisor \(pid \d+\) not done after)`).MatchString(log) {
		t.Errorf("the epilog cut the supervisor's drain short:\n%s", log)
	}
}
