package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// TestHostEnergyHandedDescriptors: the zones are taken from the
// descriptors root handed down and read through them alone. After the
// hand-over the zone's path names another file (its counter written
// through a descriptor the test kept): the supervisor's sums follow the
// handed file, never the path, across the counter's wrap. A descriptor
// open for writing, or not a regular file, is refused and named.
func TestHostEnergyHandedDescriptors(t *testing.T) {
	tree := t.TempDir()
	path := filepath.Join(tree, "energy_uj")
	if err := os.WriteFile(path, []byte("999000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Root's read-only descriptor (dup'ed to a number of the process's
	// own, as the prolog's ExtraFiles land), and the test's writer of the
	// same file.
	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(ro.Fd()))
	ro.Close()
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rw, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	const maxUJ = 1000000
	v := fmt.Sprintf("%d:package-0:%d,%d:package-0/dram:%d,%d:package-1:%d", fd, maxUJ, rw.Fd(), maxUJ, pr.Fd(), maxUJ)
	zones, err := InheritedEnergyZones(v)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("zone package-0/dram: descriptor %d is not open read-only", rw.Fd())) ||
		!strings.Contains(err.Error(), fmt.Sprintf("zone package-1: descriptor %d is not a regular file", pr.Fd())) {
		t.Errorf("error %v: want the writable and the pipe descriptors named", err)
	}
	if len(zones) != 1 || zones[0].Name != "package-0" || zones[0].MaxUJ != maxUJ {
		t.Fatalf("zones %+v", zones)
	}
	if fl, _, _ := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); fl&syscall.FD_CLOEXEC == 0 {
		t.Errorf("descriptor %d is not close-on-exec: the collector would inherit it", fd)
	}
	m := newHostEnergyMeter(zones, t.Logf)
	defer m.close()
	// The path now names another file; the handed one goes on through w.
	if err := os.Rename(path, path+".handed"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set := func(uj int) {
		t.Helper()
		if err := w.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteAt([]byte(fmt.Sprintf("%d\n", uj)), 0); err != nil {
			t.Fatal(err)
		}
	}
	page := func() string { return readingText(m.families()) }
	set(999500) // +500 µJ
	m.sample()
	set(1500) // past the range: +500 to the top, +1500 after the wrap
	want := func(j string, wraps int) {
		t.Helper()
		p := page()
		if !strings.Contains(p, vocab.HostEnergyJoules+`{zone="package-0"} `+j+"\n") || !strings.Contains(p, fmt.Sprintf(`%s{zone="package-0"} %d`, vocab.HostEnergyWraps, wraps)) {
			t.Errorf("page:\n%s\nwant %s J, %d wraps", p, j, wraps)
		}
	}
	want("0.0025", 1)
	set(2000)
	want("0.003", 1)
}

// TestHostEnergyNone: without EnvHostEnergy nothing is taken and the
// reading has no host energy.
func TestHostEnergyNone(t *testing.T) {
	zones, err := InheritedEnergyZones("")
	if zones != nil || err != nil {
		t.Fatalf("%v, %v", zones, err)
	}
	m := newHostEnergyMeter(zones, nil)
	if f := m.families(); f != nil {
		t.Errorf("families %v, want none", f)
	}
	m.close()
	m.run(0)
}
