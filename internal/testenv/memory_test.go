package testenv

import (
	"os"
	"reflect"
	"testing"
)

// TestMemoryLine: a summary printed by the test reads back whole, from
// anywhere in a line of `go test -v` output; other lines do not parse.
func TestMemoryLine(t *testing.T) {
	s := MemorySummary{Variant: "GOGC=50", Binary: "otelcol-gym", Size: 85.5, Round: 2, Samples: 20,
		RSS: 72.6, PSS: 46.2, File: 57.3, Anon: 15.4, MaxRSS: 73.6, Segments: []float64{28.1, 28.7, 0.9}, LoadRate: 10009, LoadCPU: 2.18}
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
