package record

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gym-otel-spank/gym-otel-spank/internal/contract"
)

func TestRecordRoundTrip(t *testing.T) {
	r := &Record{Status: "failed", OnFailure: "fail", Reason: "line one\nline two", FinalWait: 16, DrainTimeout: 20,
		SupervisorPID: 42, SupervisorStart: 123456, UID: 2001, FilterPorts: []int{40001, 40002},
		Env: []KV{{"A", "1"}, {"OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20x"}}, Unset: []string{"OTEL_TOKEN"}}
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
	if _, err := (&Record{Status: "ready", Env: []KV{{"A", "x\ny"}}}).Marshal(); err == nil {
		t.Error("a newline in an env value was accepted")
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
