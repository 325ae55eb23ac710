package supervise

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

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

// TestCgroupReading reads the real groups of this host: every point one
// of the families' with its labels; values of the "collector" group (the
// test process's own) present; the job, which has no Slurm group here, is
// one cgroup_not_kept point with the reason and no value.
func TestCgroupReading(t *testing.T) {
	r := hostReader(t)
	text := readingText(cgroupFamilies(r.read()))
	t.Logf("%s", text)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.HasPrefix(line, "# TYPE ") {
			name := strings.Fields(line)[2]
			if seen[name] {
				t.Errorf("family %s twice", name)
			}
			seen[name] = true
			continue
		}
		if !sampleLine.MatchString(line) {
			t.Errorf("not a point of ours: %q", line)
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

// BenchmarkCgroupReading is the reader's cost per reading on this host:
// finding the job's Slurm groups, reading the collector's, and encoding
// the OTLP request.
func BenchmarkCgroupReading(b *testing.B) {
	r := hostReader(b)
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		n := &nodeMetrics{cg: r, starts: map[string]int64{}}
		if _, err := proto.Marshal(n.request(n.read(), time.Now())); err != nil {
			b.Fatal(err)
		}
	}
	wall := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(wall.Microseconds())/float64(b.N), "wall-µs/reading")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/reading")
}
