package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestReleasable(t *testing.T) {
	const exe = "/usr/libexec/gym-otel-spank/otelcol-gym"
	smaps := `00400000-02000000 r-xp 00000000 fd:01 1234 ` + exe + `
Size:              28672 kB
Rss:               28000 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
02000000-04000000 r--p 01c00000 fd:01 1234 ` + exe + `
Size:              32768 kB
Anonymous:             0 kB
04000000-04100000 rw-p 03c00000 fd:01 1234 ` + exe + `
Anonymous:           100 kB
04100000-04200000 r--p 03d00000 fd:01 1234 ` + exe + `
Anonymous:             4 kB
04200000-04300000 rw-p 00000000 00:00 0
Anonymous:          1024 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:01 99 /usr/lib/other.so
Anonymous:             0 kB
7f0000100000-7f0000200000 r--s 00000000 fd:01 1234 ` + exe + `
Anonymous:             0 kB
7f0000200000-7f0000300000 r-xp 00000000 fd:01 1234 ` + exe + ` (deleted)
Anonymous:             0 kB
7f0000300000-7f0000400000 r-xp 00000000 fd:01 1234 ` + exe + `
Size:               1024 kB
`
	got := releasable([]byte(smaps), exe)
	want := [][2]uintptr{{0x00400000, 0x02000000}, {0x02000000, 0x04000000}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("releasable: got %x, want %x (the executable's private read-only mappings without anonymous pages; "+
			"not the writable, shared, copy-on-written, other files', deleted or unfinished ones)", got, want)
	}
	if got := releasable([]byte(smaps), "/other"); len(got) != 0 {
		t.Fatalf("releasable for another executable: %x, want none", got)
	}
}

// residentOfExe is the resident kB of this process's mappings of its own
// executable with the given permissions.
func residentOfExe(t *testing.T, perms string) int {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	kb, mine := 0, false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && !strings.HasSuffix(f[0], ":"):
			mine = len(f) == 6 && f[5] == exe && f[1] == perms
		case mine && len(f) >= 2 && f[0] == "Rss:":
			n, _ := strconv.Atoi(f[1])
			kb += n
		}
	}
	return kb
}

// readOnlyData is about 64 KiB of the binary's read-only data (a constant, which
// the linker puts there): its bytes must read the same after the release.
const (
	rod0         = "gym-otel-spank: the read-only data of the collector's binary.\n"
	rod1         = rod0 + rod0 + rod0 + rod0
	rod2         = rod1 + rod1 + rod1 + rod1
	rod3         = rod2 + rod2 + rod2 + rod2
	rod4         = rod3 + rod3 + rod3 + rod3
	readOnlyData = rod4 + rod4 + rod4 + rod4
)

// TestReleaseStartPages releases this test binary's own pages (a Go binary
// like the collector) and checks that its resident text shrank and that
// code and read-only data still run and read the same.
func TestReleaseStartPages(t *testing.T) {
	sum := sha256.Sum256([]byte(readOnlyData))
	before := residentOfExe(t, "r-xp")
	if before == 0 {
		t.Fatal("no resident text of the test binary in /proc/self/smaps")
	}
	releaseStartPages()
	after := residentOfExe(t, "r-xp")
	t.Logf("resident text of the test binary: %d kB before the release, %d kB after", before, after)
	if after >= before {
		t.Fatalf("resident text of the test binary: %d kB before the release, %d kB after: nothing was released", before, after)
	}
	if sha256.Sum256([]byte(readOnlyData)) != sum || len(readOnlyData) != 1024*len(rod0) {
		t.Fatal("read-only data reads differently after the release")
	}
}

func TestGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		cur  int
		rate float64
		want int
	}{
		{busyGCPercent, 0, idleGCPercent},
		{busyGCPercent, 600 << 10, idleGCPercent},
		{busyGCPercent, gcIdleRate + 1, busyGCPercent}, // between: stays
		{idleGCPercent, gcIdleRate + 1, idleGCPercent},
		{idleGCPercent, gcBusyRate + 1, busyGCPercent},
		{idleGCPercent, 300 << 20, busyGCPercent},
	} {
		if got := gcPercentFor(c.cur, c.rate); got != c.want {
			t.Errorf("gcPercentFor(%d, %.0f) = %d, want %d", c.cur, c.rate, got, c.want)
		}
	}
}
