package supervise

import (
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
)

// hostReader is a reader for a job that has no Slurm group on this host,
// whose "collector" group is the test process's own groups (real files
// of this host, read-only).
func hostReader(t testing.TB) *cgroupReader {
	t.Helper()
	r, err := newCgroupReader(jobfacts.Facts{JobID: "4000000001", Node: "nohost"})
	if err != nil {
		t.Fatal(err)
	}
	self, err := cgroup.ProcCgroups("self")
	if err != nil {
		t.Fatal(err)
	}
	r.own, r.ownWhy = nil, ""
	for _, h := range r.hs {
		p := self.V2
		if h.Version == cgroup.V1 {
			p = self.V1[h.Controllers[0]]
		}
		if fi, err := os.Stat(filepath.Join(h.Mount, p)); err == nil && fi.IsDir() {
			r.own = append(r.own, cgroup.StatsDir{H: h, Path: filepath.Join(h.Mount, p)})
		}
	}
	if len(r.own) == 0 {
		t.Skip("the test process is in no cgroup hierarchy this host mounts")
	}
	return r
}

var sampleLine = regexp.MustCompile(`^[a-z_]+\{cgroup="(job|step|collector)"(,step="[^"]*")?(,family="[a-z_]+",reason="(\\.|[^"\\])*")?\} [0-9.e+-]+$`)

// TestCgroupText serves the real groups of this host as Prometheus text:
// every line a HELP, a TYPE or a sample of the families; values of the
// "collector" group (the test process's own) present; the job, which has
// no Slurm group here, is one cgroup_not_kept series with the reason and
// no value.
func TestCgroupText(t *testing.T) {
	r := hostReader(t)
	srv, err := newCgroupServer(r, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(srv.port()) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	t.Logf("%s", text)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
			name := strings.Fields(line)[2]
			if strings.HasPrefix(line, "# TYPE ") && seen[name] {
				t.Errorf("family %s typed twice", name)
			}
			if strings.HasPrefix(line, "# TYPE ") {
				seen[name] = true
			}
			continue
		}
		if !sampleLine.MatchString(line) {
			t.Errorf("not a sample of ours: %q", line)
		}
	}
	if !regexp.MustCompile(`(?m)^cgroup_memory_current_bytes\{cgroup="collector"\} [1-9]`).MatchString(text) {
		t.Errorf("no memory of the collector group (the test process's)")
	}
	if !regexp.MustCompile(`(?m)^cgroup_not_kept\{cgroup="job",family="all",reason="no Slurm cgroup of job 4000000001 on this node`).MatchString(text) {
		t.Errorf("the job without a Slurm group is not reported as not kept")
	}
	if regexp.MustCompile(`(?m)^cgroup_[a-z_]+(_total|_bytes)\{cgroup="job"`).MatchString(text) {
		t.Errorf("a value for a job that has no group here")
	}
}

// BenchmarkCgroupScrape is the reader's cost per scrape on this host:
// finding the job's Slurm groups, reading the collector's, and writing
// the text.
func BenchmarkCgroupScrape(b *testing.B) {
	r := hostReader(b)
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		_ = writeCgroupText(io.Discard, r.read())
	}
	wall := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(wall.Microseconds())/float64(b.N), "wall-µs/scrape")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/scrape")
}

// The attack: another local user holds connections to the job's cgroup
// page. Each is closed at accept (its peer is not the supervisor's uid),
// and the page is served to the supervisor's own user meanwhile.
func TestCgroupServerAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the attacker runs as another user")
	}
	srv, err := newCgroupServer(hostReader(t), 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	const n = 40
	dir := openDir(t)
	cmd := exec.Command(CopyTestBinary(t, dir), "-test.run=^TestFinalSinkAttackerChild$")
	cmd.Env = []string{"GOS_FINAL_PORT=" + strconv.Itoa(srv.port()), "GOS_FINAL_CONNS=" + strconv.Itoa(n)}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the attacker: %v: %s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("CLOSED=%d", n)) {
		t.Errorf("attacker: %s, want all %d connections closed by the server", out, n)
	}
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(srv.port()) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), vocab.CgroupNotKept) {
		t.Errorf("the page to the supervisor's own user: %q", b)
	}
	if f := srv.ln.Foreign(); f != n {
		t.Errorf("%d connections closed for their uid, want %d", f, n)
	}
}
