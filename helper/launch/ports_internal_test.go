package launch

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// fakeSysctl points sysctlNet at a tree with the given
// ip_local_port_range and ip_local_reserved_ports for the test.
func fakeSysctl(t *testing.T, ephemeral, reserved string) {
	t.Helper()
	dir := t.TempDir()
	for name, v := range map[string]string{"ip_local_port_range": ephemeral, "ip_local_reserved_ports": reserved} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := sysctlNet
	sysctlNet = dir
	t.Cleanup(func() { sysctlNet = old })
}

// kernelEphemeral is this host's ip_local_port_range.
func kernelEphemeral(t *testing.T) PortRange {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	r, err := ParsePortRange(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFreePortsAboveEphemeral: on this host, every port chosen is above
// the kernel's ephemeral range, distinct, and free (bindable after).
func TestFreePortsAboveEphemeral(t *testing.T) {
	eph := kernelEphemeral(t)
	if _, ok := JobPortSpan(); !ok {
		t.Skipf("this host's ephemeral range %d-%d leaves fewer than %d ports above it", eph.Low, eph.High, minJobSpan)
	}
	for round := 0; round < 20; round++ {
		ports, err := FreePorts(6, nil)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if p <= eph.High || p > 65535 || seen[p] {
				t.Fatalf("ports %v: %d is not a distinct port above %d-%d", ports, p, eph.Low, eph.High)
			}
			seen[p] = true
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[0]))
		if err != nil {
			t.Fatalf("port %d chosen but not free after: %v", ports[0], err)
		}
		l.Close()
	}
}

// TestFreePortsPassesOver: the site's reserved ports, the ports skip
// reports and a port in use are never chosen; with no port left above the
// range, the kernel chooses (in this host's own ephemeral range).
func TestFreePortsPassesOver(t *testing.T) {
	// Above a range ending at 64999 are 536 ports; the site reserves
	// 65000-65300 and skip the next 100: 65401-65535 are left.
	fakeSysctl(t, "32768\t64999", "1024,65000-65300")
	inUse, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inUse.Close()
	// Hold one of the ports left, so that a free-port check must see it.
	var held net.Listener
	for p := 65401; p <= 65535 && held == nil; p++ {
		held, _ = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	}
	if held == nil {
		t.Skip("no free port in 65401-65535 on this host")
	}
	defer held.Close()
	heldPort := held.Addr().(*net.TCPAddr).Port
	skip := func(p int) bool { return p >= 65301 && p <= 65400 }
	for round := 0; round < 20; round++ {
		ports, err := FreePorts(7, skip)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if p < 65401 || p == heldPort {
				t.Fatalf("ports %v: %d is reserved, skipped or in use", ports, p)
			}
		}
	}

	// A range up to 65535: the kernel's choice, in its own range.
	fakeSysctl(t, "1024 65535", "")
	if _, ok := JobPortSpan(); ok {
		t.Fatal("JobPortSpan: ok above a range ending at 65535")
	}
	eph := kernelEphemeral(t)
	ports, err := FreePorts(6, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if !eph.Has(p) || collectorDefault(p) {
			t.Errorf("the kernel's choice %v: %d not in its range %d-%d", ports, p, eph.Low, eph.High)
		}
	}
}

// TestParsePortRange: the kernel's and slurm.conf's spellings, and
// refusals naming the value.
func TestParsePortRange(t *testing.T) {
	for in, want := range map[string]PortRange{"32768\t60999\n": {32768, 60999}, "60001-63000": {60001, 63000}, "8080": {8080, 8080}, " 1 65535 ": {1, 65535}} {
		if got, err := ParsePortRange(in); err != nil || got != want {
			t.Errorf("ParsePortRange(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0-10", "10-5", "1-65536", "a-b", "1-2-3"} {
		if _, err := ParsePortRange(in); err == nil {
			t.Errorf("ParsePortRange(%q): no error", in)
		}
	}
}
