package jobdir

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestOutputDir(t *testing.T) {
	for _, c := range []struct {
		link  string
		index int
		node  string
		want  string
	}{
		{"", 0, "gn1", "/runs/7/otel"},
		{"", 2, "gn2", "/runs/7/otel/nodes/gn2"},
		{"8", 0, "gn1", "/runs/7/otel/links/8"},
		{"8", 1, "gn2", "/runs/7/otel/links/8/nodes/gn2"},
		{"../8", 1, "x/../../etc", "/runs/7/otel/links/8/nodes/etc"},
	} {
		if got := OutputDir("/runs/7", c.link, c.index, c.node); got != c.want {
			t.Errorf("OutputDir(%q, %d, %q) = %q, want %q", c.link, c.index, c.node, got, c.want)
		}
	}
}

// TestNodeDirs: the first node's dir, its nodes, then each link and its
// nodes, sorted; files and refused entries are left out, a refused link is
// not looked into.
func TestNodeDirs(t *testing.T) {
	job := t.TempDir()
	otel := filepath.Join(job, Otel)
	for _, d := range []string{"nodes/b", "nodes/a", "links/9/nodes/c", "links/8", "links/7/nodes/d"} {
		if err := os.MkdirAll(filepath.Join(otel, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(otel, Nodes, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if OtelDir(job) != otel || OtelDir(otel) != otel {
		t.Fatalf("OtelDir(%s) = %s, OtelDir(%s) = %s", job, OtelDir(job), otel, OtelDir(otel))
	}
	got, skipped := NodeDirs(otel, func(p string) bool { return filepath.Base(p) != "7" })
	rel := func(p string) string { r, _ := filepath.Rel(otel, p); return r }
	var have []string
	for _, d := range got {
		have = append(have, rel(d.Path)+"|"+d.Node+"|"+d.Link)
	}
	want := []string{".||", "nodes/a|a|", "nodes/b|b|", "links/8||8", "links/9||9", "links/9/nodes/c|c|9"}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("NodeDirs = %q, want %q", have, want)
	}
	if len(skipped) != 1 || rel(skipped[0]) != "links/7" {
		t.Errorf("skipped = %q, want links/7", skipped)
	}
	if all, _ := NodeDirs(otel, nil); len(all) != 8 {
		t.Errorf("NodeDirs(nil) gave %d dirs, want 8", len(all))
	}
}

// TestState: WriteState and ReadState agree; the field names are the
// format's (the keys other programs and the docs read); a missing file is
// os.IsNotExist, a file that is not JSON is ErrFormat.
func TestState(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadState(dir); !os.IsNotExist(err) {
		t.Fatalf("ReadState of an empty dir: %v, want not exist", err)
	}
	st := State{Status: StatusReady, Ports: Ports{OTLPGRPC: 1, OTLPHTTP: 2, Health: 3, Telemetry: 4, Final: 5},
		ForeignTargets: []ForeignTarget{{Job: "gym/policy", Port: 8000, UID: 2002, First: "2026-01-02T03:04:05Z", Last: "2026-01-02T03:04:10Z"}},
		SupervisorPID:  6, CollectorPID: 7, Restarts: 1, ExportProblems: "x", UpdatedAt: "t", JobID: "9", RestartCount: "0", SLUID: "s"}
	if err := WriteState(dir, st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"status"`, `"ports"`, `"otlp_grpc"`, `"otlp_http"`, `"health"`, `"telemetry"`, `"final"`,
		`"supervisor_pid"`, `"collector_pid"`, `"restarts"`, `"export_problems"`, `"foreign_targets"`, `"updated_at"`, `"job_id"`, `"restart_count"`, `"sluid"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("state.json lacks %s:\n%s", k, b)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, StateFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := ReadState(dir)
	if err != nil || !reflect.DeepEqual(got, st) {
		t.Errorf("ReadState = %+v, %v; want %+v", got, err, st)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte("{\"status\":\"ready\",\"restarts\":\"x\"}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadState(dir); !errors.Is(err, ErrFormat) || got.Status != StatusReady || !strings.Contains(err.Error(), StateFile) {
		t.Errorf("ReadState of a bad state = %+v, %v; want ErrFormat naming the file, status read", got, err)
	}
}

// TestLoopbackEveryPort: Loopback lists every port field of Ports, the
// plugin receiver's too, in field order, and leaves out the zero ones.
func TestLoopbackEveryPort(t *testing.T) {
	p := Ports{OTLPGRPC: 1, OTLPHTTP: 2, Health: 3, Telemetry: 4, Final: 5, Plugin: 6}
	if got := p.Loopback(); !reflect.DeepEqual(got, []int{1, 2, 3, 4, 5, 6}) {
		t.Errorf("Loopback() = %v, want [1 2 3 4 5 6]", got)
	}
	if n := reflect.TypeOf(p).NumField(); n != 6 {
		t.Errorf("Ports has %d fields, this test and Loopback know 6", n)
	}
	p.Final = 0
	if got := p.Loopback(); !reflect.DeepEqual(got, []int{1, 2, 3, 4, 6}) {
		t.Errorf("Loopback() = %v, want [1 2 3 4 6]", got)
	}
}
