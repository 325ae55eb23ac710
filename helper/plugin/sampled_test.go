package plugin

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/lifecycle"
)

// TestMakeSampledHint: an empty 0600 regular file owned by the job's user,
// replacing whatever an earlier use of the dir left (a file or a symlink,
// which is removed, never followed). Needs root for the chown.
func TestMakeSampledHint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, lifecycle.SampledFile)
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if err := MakeSampledHint(dir, 2345, 3456); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != 0 || st.Uid != 2345 || st.Gid != 3456 {
		t.Errorf("hint: mode %v size %d owner %d:%d, want an empty 0600 regular file of 2345:3456", fi.Mode(), fi.Size(), st.Uid, st.Gid)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the symlink's target was touched: %q", b)
	}
	os.WriteFile(p, []byte("targets=1\nsampled_ms=5\n"), 0o600)
	if err := MakeSampledHint(dir, 2345, 3456); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Size() != 0 {
		t.Errorf("an old hint was kept (%d bytes)", fi.Size())
	}
}
