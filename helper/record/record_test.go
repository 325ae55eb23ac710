package record

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
)

func TestRecordRoundTrip(t *testing.T) {
	r := &Record{Status: "failed", OnFailure: "fail", Reason: "line one\nline two", FinalWait: 16, DrainTimeout: 20,
		SupervisorPID: 42, SupervisorStart: 123456, UID: 2001, FilterPorts: []int{40001, 40002}, FilterCluster: "c 1,=%\n",
		OutputDir: "/runs/r 1/otel", Backend: "https://otlp.example.com:4318/base",
		Env: []KV{{"A", "1"}, {"OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20x"}}, Unset: []string{"OTEL_TOKEN"},
		ResAttrs: []KV{{"nv.dl.job.uuid", "9a6e5010-16a8-54fc-8445-d1e1b1fffcd2"}, {"slurm.job.user", "a%2Cb%3Dc"}}}
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	r.Reason = "line one line two"
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("got %+v\nwant %+v", got, r)
	}
	// A record a prolog wrote before the packet filter's chains held the
	// cluster's name has filter ports and no filter_cluster line: its
	// chains are removed by their legacy names, and a rewrite keeps that.
	old := []byte("status=ready\nfilter_ports=40001,40002\n")
	for i := 0; i < 2; i++ {
		got, err := Parse(old)
		if err != nil || !got.FilterLegacy || got.FilterCluster != "" || len(got.FilterPorts) != 2 {
			t.Fatalf("a record without filter_cluster (pass %d): %+v, %v; want legacy", i, got, err)
		}
		if old, err = got.Marshal(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := Parse([]byte("status=ready\nfilter_ports=\n")); err != nil || got.FilterLegacy {
		t.Errorf("a record without filter ports: %+v, %v; want no legacy", got, err)
	}
	if _, err := (&Record{Status: "ready", Env: []KV{{"A", "x\ny"}}}).Marshal(); err == nil {
		t.Error("a newline in an env value was accepted")
	}
	for _, kv := range []KV{{"a,b", "1"}, {"a", "x=y"}, {"a", "x,y"}, {"", "1"}, {"a b", "1"}} {
		if _, err := (&Record{Status: "ready", ResAttrs: []KV{kv}}).Marshal(); err == nil {
			t.Errorf("resattr %q=%q was accepted: OTEL_RESOURCE_ATTRIBUTES cannot carry it unencoded", kv.Key, kv.Value)
		}
	}
}

// TestRecordBackendAndDir: the backend and the output dir the batch step
// names in the job's output: never a credential, always one line.
func TestRecordBackendAndDir(t *testing.T) {
	for in, want := range map[string]string{
		"https://otlp.example.com:4318":             "https://otlp.example.com:4318",
		"http://127.0.0.1:4318/otlp":                "http://127.0.0.1:4318/otlp",
		"https://user:secret@otlp.example.com/x":    "https://otlp.example.com/x",
		"https://otlp.example.com/x?api_key=secret": "https://otlp.example.com/x",
		"https://otlp.example.com/x#secret":         "https://otlp.example.com/x",
		"ftp://otlp.example.com":                    "",
		"otlp.example.com:4318":                     "",
		"https://otlp.example.com/a\nb":             "",
		"":                                          "",
	} {
		if got := Backend(in); got != want {
			t.Errorf("Backend(%q) = %q, want %q", in, got, want)
		}
	}
	data, err := (&Record{Status: "ready", OutputDir: "/runs/a\nb/otel", Backend: "https://u:p@h:1/x?k=v"}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.OutputDir != "" || got.Backend != "https://h:1/x" || strings.Contains(string(data), "p@") || strings.Contains(string(data), "k=v") {
		t.Fatalf("output_dir %q backend %q; record:\n%s", got.OutputDir, got.Backend, data)
	}
}

func TestRecordDirRefusesSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (the record dir is root's)")
	}
	base := t.TempDir()
	other := t.TempDir()
	if err := os.Symlink(other, filepath.Join(base, "gn1")); err != nil {
		t.Fatal(err)
	}
	if _, err := MakeJobDir(base, "gn1", 7); err == nil {
		t.Fatal("a symlinked node dir was accepted")
	}
	dir, err := MakeJobDir(base, "gn2", 7)
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{Status: "ready", OnFailure: "continue", UID: 1}
	if err := Write(dir, rec); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(dir, contract.RecordFile))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v", fi.Mode().Perm())
	}
	if _, err := Read(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := MakeJobDir(base, "../x", 7); err == nil {
		t.Error("a node name with a slash was accepted")
	}
}

func TestUserText(t *testing.T) {
	if got := UserText("a\nb\x1b[31mred\r\x00 \xff end", 100); got != "a b [31mred ? end" {
		t.Fatalf("%q", got)
	}
	long := strings.Repeat("é", 1000) // 2000 bytes
	got := UserText(long, 100)
	if len(got) > 100 || !strings.HasSuffix(got, "bytes cut)") || !utf8.ValidString(got) {
		t.Fatalf("%d %q", len(got), got)
	}
}

// TestMakeControlDir: the control socket's dir in a job's record dir is root's
// and 0700 (only root can connect to a socket in it), made again after a
// chmod, a socket file an earlier run of the job left is removed, and a
// record dir so deep that the socket's path would not fit a unix socket
// is refused, naming record_dir.
func TestMakeControlDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root's dirs: run as root")
	}
	jobDir, err := MakeJobDir(filepath.Join(t.TempDir(), "records"), "n1", 7)
	if err != nil {
		t.Fatal(err)
	}
	path, err := MakeControlDir(jobDir)
	if err != nil || path != filepath.Join(jobDir, "hold", "sock") {
		t.Fatalf("MakeControlDir: %q %v", path, err)
	}
	fi, err := os.Lstat(filepath.Dir(path))
	if err != nil || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Fatalf("hold dir: %v %v", fi.Mode(), err)
	}
	// A leftover socket of an earlier run, and a dir someone widened.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	os.Chmod(filepath.Dir(path), 0o755)
	if again, err := MakeControlDir(jobDir); err != nil || again != path {
		t.Fatalf("again: %q %v", again, err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the earlier run's socket is still there: %v", err)
	}
	if fi, _ := os.Lstat(filepath.Dir(path)); fi.Mode().Perm() != 0o700 {
		t.Errorf("hold dir mode %v after a second MakeControlDir", fi.Mode())
	}
	deep, err := MakeJobDir(filepath.Join(t.TempDir(), strings.Repeat("r", 90)), "n1", 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := MakeControlDir(deep); err == nil || !strings.Contains(err.Error(), "record_dir") {
		t.Errorf("a socket path past %d bytes: %v", contract.ControlPathMax, err)
	}
}
