package launch

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// PortRange is the TCP ports Low through High, both included.
type PortRange struct{ Low, High int }

// Has reports whether port is in r.
func (r PortRange) Has(port int) bool { return r.Low <= port && port <= r.High }

// ParsePortRange reads a range as the kernel's ip_local_port_range ("32768
// 60999", tab- or space-separated) and slurm.conf's SrunPortRange
// ("60001-63000") write it; one port alone is a range of one. Errors
// name the value: not ports in 1..65535, or Low above High.
func ParsePortRange(s string) (PortRange, error) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == '-' || r == ' ' || r == '\t' || r == '\n' })
	if len(f) == 1 {
		f = append(f, f[0])
	}
	var r PortRange
	if len(f) == 2 {
		lo, err1 := strconv.Atoi(f[0])
		hi, err2 := strconv.Atoi(f[1])
		r = PortRange{lo, hi}
		if err1 == nil && err2 == nil && lo >= 1 && lo <= hi && hi <= 65535 {
			return r, nil
		}
	}
	return PortRange{}, fmt.Errorf("port range %q: want LOW-HIGH, ports in 1..65535, LOW <= HIGH", strings.TrimSpace(s))
}

// sysctlNet is where the kernel's IPv4 settings are read (a test's tree in
// this package's tests).
var sysctlNet = "/proc/sys/net/ipv4"

// defaultEphemeral is Linux's ip_local_port_range where it cannot be read.
var defaultEphemeral = PortRange{32768, 60999}

// minJobSpan is the fewest ports above the ephemeral range that FreePorts
// chooses among: with fewer, random choices by concurrent prologs would
// meet too often, and the kernel chooses (in its ephemeral range).
const minJobSpan = 256

// JobPortSpan is where FreePorts chooses a job's ports on this node: above
// the kernel's ephemeral range (ip_local_port_range, Linux's 32768-60999
// where it cannot be read) up to 65535, the ports the kernel never hands a
// socket that asks for any port. So a job's port, while a packet-filter
// rule of the job still keeps it (an epilog that never ran, until a later
// prolog's sweep), is never an srun's or any other process's kernel-chosen
// port: such a rule would reset every connection to it. ok is false when
// that span holds fewer than minJobSpan ports (an ephemeral range that
// reaches 65535). Ports below the range are not used: fixed services and
// the jobs' own applications (a model server's 8000, a training run's
// 29500) live there.
func JobPortSpan() (span PortRange, ok bool) {
	eph := defaultEphemeral
	if b, err := os.ReadFile(filepath.Join(sysctlNet, "ip_local_port_range")); err == nil {
		if r, err := ParsePortRange(string(b)); err == nil {
			eph = r
		}
	}
	span = PortRange{eph.High + 1, 65535}
	return span, span.High-span.Low+1 >= minJobSpan
}

// reservedPorts reads the kernel's ip_local_reserved_ports ("8080,9000-9010";
// empty: none), ports a site keeps for its fixed services. Unreadable or
// malformed parts: none.
func reservedPorts() []PortRange {
	b, err := os.ReadFile(filepath.Join(sysctlNet, "ip_local_reserved_ports"))
	if err != nil {
		return nil
	}
	var rs []PortRange
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		if r, err := ParsePortRange(part); err == nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// collectorDefault reports whether p is one of the collector's own default
// ports (4317, 4318, 13133, 8888, 55679, 1777), which a job's other
// configuration may name.
func collectorDefault(p int) bool {
	switch p {
	case 4317, 4318, 13133, 8888, 55679, 1777:
		return true
	}
	return false
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1, each one a
// listener could bind, all held until the last is chosen, then closed.
// They are chosen at random in JobPortSpan, passing over the kernel's
// ip_local_reserved_ports, the collector's defaults and every port skip
// reports (nil: none; the prolog's are SrunPortRange and the ports the
// node's packet filter keeps already). Where that span is too small, or
// after 64 tries per port, the kernel chooses the rest (a listener on
// port 0, in its ephemeral range). Nothing holds them after: on a shared
// node the packet filter (helper/portfilter), installed before the
// collector binds them, keeps them to the job's group. Errors: the
// kernel's.
func FreePorts(n int, skip func(port int) bool) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	chosen := map[int]bool{}
	passed := func(p int) bool {
		return chosen[p] || collectorDefault(p) || skip != nil && skip(p)
	}
	if span, ok := JobPortSpan(); ok {
		reserved := reservedPorts()
		size := span.High - span.Low + 1
		for tries := 64 * n; tries > 0 && len(ports) < n; tries-- {
			p := span.Low + rand.IntN(size)
			if passed(p) || slices.ContainsFunc(reserved, func(r PortRange) bool { return r.Has(p) }) {
				continue
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				continue // in use
			}
			ls = append(ls, l)
			chosen[p] = true
			ports = append(ports, p)
		}
	}
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("choosing a loopback port: %w", err)
		}
		ls = append(ls, l)
		if p := l.Addr().(*net.TCPAddr).Port; !passed(p) {
			chosen[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}
