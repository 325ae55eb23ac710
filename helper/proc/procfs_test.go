package proc

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// This process is among the pids, and its own files read back what it is.
func TestReadersSelf(t *testing.T) {
	pid := os.Getpid()
	pids, err := Pids()
	if err != nil || !slices.Contains(pids, pid) {
		t.Fatalf("Pids: %v (%d pids), without this process %d", err, len(pids), pid)
	}
	if c, err := Comm(pid); err != nil || c == "" || strings.ContainsAny(c, "\n") {
		t.Fatalf("Comm %q %v", c, err)
	}
	if uid, err := Owner(pid); err != nil || int(uid) != os.Geteuid() {
		t.Fatalf("Owner %d %v, want %d", uid, err, os.Geteuid())
	}
	if cl, err := Cmdline(pid); err != nil || !bytes.HasPrefix(cl, []byte(os.Args[0]+"\x00")) {
		t.Fatalf("Cmdline %q %v", cl, err)
	}
	os.Setenv("PROC_TEST_MARK", "1") // not in the kernel's copy: only what exec got
	if env, err := Environ(pid); err != nil || !bytes.Contains(env, []byte("PATH=")) || bytes.Contains(env, []byte("PROC_TEST_MARK")) {
		t.Fatalf("Environ: %v", err)
	}
	if b := BootTime(); b.IsZero() || b.After(time.Now()) {
		t.Fatalf("BootTime %v", b)
	}
	if _, err := Comm(1 << 30); !os.IsNotExist(err) {
		t.Fatalf("Comm of no process: %v", err)
	}
}

func TestParseTCP(t *testing.T) {
	text := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0 100 0 0 10 0
   1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  x        0 333 1 0 20 4 30 10 -1
   2: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  0        0 444
`
	rows, err := ParseTCP(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []TCPSocket{
		{Local: "0100007F:1F90", Remote: "00000000:0000", State: "0A", UID: 1000, Inode: 111},
		{Local: "0100007F:9C40", Remote: "0100007F:1F90", State: "01", UID: 0, Inode: 444},
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("%+v", rows)
	}
	if _, err := ReadTCP(NetTCP); err != nil {
		t.Fatal(err)
	}
}

// ReadSocketInodes lists a listening socket of this process by its inode,
// and says fs.ErrNotExist for a process that is gone (the prolog skips
// those, and names the processes it could not read otherwise).
func TestReadSocketInodes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	inos, err := ReadSocketInodes(os.Getpid())
	if err != nil || !slices.Contains(inos, st.Ino) {
		t.Errorf("own sockets %v %v: no %d", inos, err, st.Ino)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSocketInodes(cmd.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a process gone: %v", err)
	}
}
