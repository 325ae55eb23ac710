package testenv

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestMemoryLine: a summary printed by the test reads back whole, from
// anywhere in a line of `go test -v` output; other lines do not parse.
func TestMemoryLine(t *testing.T) {
	s := MemorySummary{Variant: "GOGC=50", Binary: "otelcol-gym", Size: 85.5, Round: 2, Samples: 20,
		RSS: 72.6, PSS: 46.2, File: 57.3, Anon: 15.4, MaxRSS: 73.6, Group: 40.5, Segments: []float64{28.1, 28.7, 0.9}, LoadRate: 10009, LoadCPU: 2.18}
	got, ok := ParseMemoryLine("    memory_measure_test.go:118: " + s.Line())
	if !ok || !reflect.DeepEqual(got, s) {
		t.Fatalf("ParseMemoryLine(Line()) = %+v, %v; want %+v", got, ok, s)
	}
	for _, l := range []string{"", "memory-json: {", "outage-json: {}", "=== RUN TestMeasureMemory"} {
		if _, ok := ParseMemoryLine(l); ok {
			t.Errorf("ParseMemoryLine(%q) parsed", l)
		}
	}
}

// TestReadMemAndSegments reads this test process: resident memory in both
// files, and its own executable's mappings with resident pages.
func TestReadMemAndSegments(t *testing.T) {
	m, err := ReadMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.File <= 0 || m.Anon <= 0 || m.RSS < m.File || m.PSS <= 0 {
		t.Fatalf("ReadMem(self) = %+v", m)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	seg, err := Segments(os.Getpid(), exe)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, v := range seg {
		sum += v
	}
	if len(seg) < 2 || sum <= 0 || sum > m.RSS {
		t.Fatalf("Segments(self, %s) = %v (VmRSS %v KiB)", exe, seg, m.RSS)
	}
	if _, err := ReadMem(-1); err == nil {
		t.Error("ReadMem(-1): no error")
	}
}

// TestGroupCharge reads the charge of this process's memory group from a
// hierarchy laid out as a node mounts it: a v1 memory group, and a v2
// group that has no memory.current (no memory controller) is skipped.
func TestGroupCharge(t *testing.T) {
	root := t.TempDir()
	old := cgroupRoot
	cgroupRoot = root
	t.Cleanup(func() { cgroupRoot = old })
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var v1 string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "memory") {
			v1 = f[2]
		}
	}
	if v1 == "" {
		// A pure v2 host: the unified group's memory.current.
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if strings.HasPrefix(l, "0::") {
				dir := filepath.Join(root, strings.TrimPrefix(l, "0::"))
				os.MkdirAll(dir, 0o755)
				os.WriteFile(filepath.Join(dir, "memory.current"), []byte("1048576\n"), 0o644)
			}
		}
	} else {
		dir := filepath.Join(root, "memory", v1)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "memory.usage_in_bytes"), []byte("1048576\n"), 0o644)
	}
	kib, dir, err := GroupCharge(os.Getpid())
	if err != nil || kib != 1024 || !strings.HasPrefix(dir, root) {
		t.Fatalf("GroupCharge(self) = %v KiB, %q, %v; want 1024 KiB under %s", kib, dir, err, root)
	}
	cgroupRoot = filepath.Join(root, "none")
	if _, _, err := GroupCharge(os.Getpid()); err == nil {
		t.Error("GroupCharge without a charge file: no error")
	}
}
