package proc

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestReleasable(t *testing.T) {
	const exe = "/usr/bin/gym-otel-spank"
	smaps := `00400000-02000000 r-xp 00000000 fd:01 1234 ` + exe + `
Anonymous:             0 kB
02000000-04000000 r--p 01c00000 fd:01 1234 ` + exe + `
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
`
	got := releasable([]byte(smaps), exe)
	want := [][2]uintptr{{0x00400000, 0x02000000}, {0x02000000, 0x04000000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("releasable = %x, want %x (text and read-only data only)", got, want)
	}
}

// TestReleaseStartPages releases this test binary's start pages and checks
// that its text's resident pages fell and that it still runs.
func TestReleaseStartPages(t *testing.T) {
	text := func() int {
		exe, _ := os.Readlink("/proc/self/exe")
		b, err := os.ReadFile("/proc/self/smaps")
		if err != nil {
			t.Skip(err)
		}
		in, kb := false, 0
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			if !strings.HasSuffix(f[0], ":") {
				in = len(f) == 6 && f[5] == exe && f[1] == "r-xp"
			} else if in && f[0] == "Rss:" {
				n, _ := strconv.Atoi(f[1])
				kb += n
			}
		}
		return kb
	}
	before := text()
	if n := ReleaseStartPages(); n == 0 {
		t.Fatal("nothing released")
	}
	after := text()
	if after >= before {
		t.Fatalf("text resident %d kB after the release, %d kB before", after, before)
	}
	t.Logf("text resident %d -> %d kB", before, after)
}
