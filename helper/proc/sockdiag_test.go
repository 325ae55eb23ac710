package proc_test

import (
	"net"
	"slices"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// TestListeningTCP: the kernel's listening sockets over sock_diag are the
// LISTEN rows of /proc/net/tcp and tcp6, field for field, including a v4
// and a v6 listener of this test's own.
func TestListeningTCP(t *testing.T) {
	l4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l4.Close()
	var l6 net.Listener
	if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		l6 = l
		defer l6.Close()
	}
	var want []proc.TCPSocket
	for _, p := range []string{proc.NetTCP, proc.NetTCP6} {
		rows, err := proc.ReadTCP(p)
		if err != nil && p == proc.NetTCP {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.State == "0A" {
				want = append(want, r)
			}
		}
	}
	got, err := proc.ListeningTCP()
	if err != nil {
		t.Fatalf("ListeningTCP: %v", err)
	}
	key := func(s proc.TCPSocket) string { return s.Local + " " + s.Remote + " " + s.State }
	byInode := func(rows []proc.TCPSocket) map[uint64]proc.TCPSocket {
		m := map[uint64]proc.TCPSocket{}
		for _, r := range rows {
			m[r.Inode] = r
		}
		return m
	}
	g, w := byInode(got), byInode(want)
	for ino, r := range w {
		if s, ok := g[ino]; !ok || key(s) != key(r) || s.UID != r.UID {
			t.Errorf("inode %d: sock_diag %+v, /proc %+v", ino, s, r)
		}
	}
	for ino, s := range g {
		if _, ok := w[ino]; !ok {
			t.Errorf("inode %d: sock_diag %+v, not in /proc (a listener opened between the reads?)", ino, s)
		}
	}
	port := l4.Addr().(*net.TCPAddr).Port
	found := slices.ContainsFunc(got, func(s proc.TCPSocket) bool { return s.Local == "0100007F:"+hex4(port) })
	if !found {
		t.Errorf("the test's own listener 127.0.0.1:%d is not among %d sockets", port, len(got))
	}
	if l6 != nil {
		p6 := l6.Addr().(*net.TCPAddr).Port
		if !slices.ContainsFunc(got, func(s proc.TCPSocket) bool { return s.Local == "000000000000000000000000"+"01000000:"+hex4(p6) }) {
			t.Errorf("the test's own listener [::1]:%d is not among %d sockets", p6, len(got))
		}
	}
}

func hex4(p int) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{digits[p>>12&15], digits[p>>8&15], digits[p>>4&15], digits[p&15]})
}
