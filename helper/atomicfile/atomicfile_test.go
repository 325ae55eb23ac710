package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The file gets its content and mode whole, replaces the old one, and no
// temporary file is left, also when the content's writer fails.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, w := range []func() error{
		func() error { return Write(p, []byte("new"), 0o644) },
		func() error { return WriteSynced(p, []byte("new"), 0o644) },
		func() error {
			return WriteFrom(p, 0o644, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err })
		},
	} {
		if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := w(); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		fi, err := os.Stat(p)
		data, _ := os.ReadFile(p)
		if err != nil || string(data) != "new" || fi.Mode().Perm() != 0o644 {
			t.Fatalf("%d: %q %v %v", i, data, fi.Mode(), err)
		}
	}
	boom := errors.New("boom")
	if err := WriteFrom(p, 0o600, func(w io.Writer) error { io.WriteString(w, "half"); return boom }); !errors.Is(err, boom) {
		t.Fatalf("fill's error: %v", err)
	}
	if data, _ := os.ReadFile(p); string(data) != "new" {
		t.Fatalf("a failed write changed the file: %q", data)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	if err := Write(filepath.Join(dir, "no", "such"), nil, 0o600); err == nil {
		t.Fatal("a missing dir is no error")
	}
}
