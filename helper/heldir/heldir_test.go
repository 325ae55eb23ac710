package heldir_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/atomicfile"
	"github.com/gym-otel-spank/gym-otel-spank/helper/heldir"
)

// jobDir is a fresh job dir of mode 0700.
func jobDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "job")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func mustOpen(t *testing.T, job, out string) *heldir.Dir {
	t.Helper()
	d, err := heldir.Open(job, out, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// empty fails unless dir holds nothing.
func empty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s got %v", dir, names)
	}
}

func TestOpenMakesEveryLevel(t *testing.T) {
	job := filepath.Join(t.TempDir(), "job-%j-expanded") // the job dir too is made
	out := filepath.Join(job, "otel", "links", "8", "nodes", "gn2")
	d := mustOpen(t, job, out)
	if d.Path != out || len(d.Warnings) != 0 {
		t.Errorf("Path %q Warnings %q", d.Path, d.Warnings)
	}
	if err := os.WriteFile(filepath.Join(d.At(), "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "f")); err != nil || string(b) != "x" {
		t.Errorf("the file through %s is not at %s: %q %v", d.At(), out, b, err)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v %v", fi.Mode(), err)
	}
}

// A symbolic link at each level from the job dir down is refused, whoever
// it leads to, and nothing is made where it leads: with openat2 and with
// openat(O_NOFOLLOW) as on a kernel without it.
func TestSymlinkAtEachLevelRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		openat bool
	}{{"openat2", false}, {"openat", true}} {
		t.Run(c.name, func(t *testing.T) {
			heldir.UseOpenat(c.openat)
			defer heldir.UseOpenat(false)
			symlinkAtEachLevel(t)
		})
	}
}

func symlinkAtEachLevel(t *testing.T) {
	for _, level := range []string{"otel", "otel/nodes", "otel/nodes/gn2"} {
		t.Run(strings.ReplaceAll(level, "/", "_"), func(t *testing.T) {
			job := jobDir(t)
			elsewhere := t.TempDir()
			out := filepath.Join(job, "otel", "nodes", "gn2")
			if err := os.MkdirAll(filepath.Dir(filepath.Join(job, level)), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(elsewhere, filepath.Join(job, level)); err != nil {
				t.Fatal(err)
			}
			d, err := heldir.Open(job, out, 0o700)
			if err == nil {
				d.Close()
				t.Fatal("a link was followed")
			}
			for _, want := range []string{filepath.Join(job, level) + " is a symbolic link", elsewhere, "refusing"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			empty(t, elsewhere)
		})
	}
}

// A dir of another user at any level is refused, naming the owner.
func TestOtherUsersDirRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a dir to nobody")
	}
	for _, level := range []string{"", "otel", "otel/nodes", "otel/nodes/gn2"} {
		t.Run("level_"+strings.ReplaceAll(level, "/", "_"), func(t *testing.T) {
			job := jobDir(t)
			out := filepath.Join(job, "otel", "nodes", "gn2")
			if err := os.MkdirAll(out, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(filepath.Join(job, level), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			d, err := heldir.Open(job, out, 0o700)
			if err == nil {
				d.Close()
				t.Fatal("another user's dir was taken")
			}
			if !strings.Contains(err.Error(), "uid 65534") || !strings.Contains(err.Error(), filepath.Join(job, level)) {
				t.Errorf("error %q does not name the dir and its owner", err)
			}
		})
	}
}

// An output dir others can write is refused; left as it was.
func TestGroupWritableOtelRefused(t *testing.T) {
	for _, mode := range []os.FileMode{0o770, 0o703} {
		job := jobDir(t)
		out := filepath.Join(job, "otel")
		if err := os.Mkdir(out, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(out, mode)
		d, err := heldir.Open(job, out, 0o700)
		if err == nil {
			d.Close()
			t.Fatalf("a %04o output dir was taken", mode)
		}
		if !strings.Contains(err.Error(), "group- or other-writable") || !strings.Contains(err.Error(), out) {
			t.Errorf("error %q", err)
		}
	}
}

// A job dir (or a dir above it, or one between it and the output dir) that
// others can write is a warning naming it, once; the open goes on.
func TestGroupWritableParentWarned(t *testing.T) {
	job := jobDir(t)
	os.Chmod(job, os.ModeSetgid|0o770) // a setgid project dir's layout
	if err := os.MkdirAll(filepath.Join(job, "otel", "nodes"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(job, "otel", "nodes"), 0o770)
	d := mustOpen(t, job, filepath.Join(job, "otel", "nodes", "gn2"))
	if len(d.Warnings) != 1 {
		t.Fatalf("warnings %q", d.Warnings)
	}
	for _, want := range []string{job + " (mode 2770)", filepath.Join(job, "otel", "nodes") + " (mode 0770)"} {
		if !strings.Contains(d.Warnings[0], want) {
			t.Errorf("warning %q lacks %q", d.Warnings[0], want)
		}
	}
	// A sticky world-writable dir (/tmp) is not a warning.
	sticky := filepath.Join(t.TempDir(), "scratch")
	os.Mkdir(sticky, 0o777)
	os.Chmod(sticky, os.ModeSticky|0o777)
	job2 := filepath.Join(sticky, "job")
	d2 := mustOpen(t, job2, filepath.Join(job2, "otel"))
	if len(d2.Warnings) != 0 {
		t.Errorf("warnings %q", d2.Warnings)
	}
}

// Once held, a rename of otel and a link (or a dir) in its place redirect
// nothing: plain writes, os.CreateTemp, atomicfile's temporary file and
// rename, appends, and a child that inherits the dir all land in the
// renamed dir; the attacker's dir gets no byte.
func TestRenameAfterOpenRedirectsNothing(t *testing.T) {
	for _, swap := range []string{"symlink", "dir"} {
		t.Run(swap, func(t *testing.T) {
			job := jobDir(t)
			attacker := t.TempDir()
			out := filepath.Join(job, "otel")
			d := mustOpen(t, job, out)
			moved := filepath.Join(job, "otel.moved")
			if err := os.Rename(out, moved); err != nil {
				t.Fatal(err)
			}
			if swap == "symlink" {
				if err := os.Symlink(attacker, out); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Mkdir(out, 0o777); err != nil {
				t.Fatal(err)
			} else {
				attacker = out
			}
			at := d.At()
			if err := os.WriteFile(filepath.Join(at, "plain"), []byte("p"), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.CreateTemp(at, ".tmp.*")
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := os.Rename(f.Name(), filepath.Join(at, "renamed")); err != nil {
				t.Fatal(err)
			}
			if err := atomicfile.Write(filepath.Join(at, "collector.yaml"), []byte("c"), 0o600); err != nil {
				t.Fatal(err)
			}
			a, err := os.OpenFile(filepath.Join(at, "collector.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			a.WriteString("l")
			a.Close()
			child := exec.Command("/bin/sh", "-c", `echo child > "$0/child.jsonl"`, heldir.ChildAt(0))
			child.ExtraFiles = []*os.File{d.File()}
			if out, err := child.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			for _, name := range []string{"plain", "renamed", "collector.yaml", "collector.log", "child.jsonl"} {
				if _, err := os.Stat(filepath.Join(moved, name)); err != nil {
					t.Errorf("%s did not land in the renamed dir: %v", name, err)
				}
			}
			empty(t, attacker)
		})
	}
}

func TestNotBelowJobDir(t *testing.T) {
	job := jobDir(t)
	for _, out := range []string{job, filepath.Dir(job), "/elsewhere/otel", "rel/otel"} {
		if d, err := heldir.Open(job, out, 0o700); err == nil {
			d.Close()
			t.Errorf("output dir %q taken", out)
		}
	}
}

// A component renamed away between its making and its opening (the
// moment another user who writes its parent can take) is refused, and the
// refusal says why, with openat2 and with openat(O_NOFOLLOW); nothing is
// opened or made in its place.
func TestMovedAwayBeforeOpenRefused(t *testing.T) {
	for _, openat := range []bool{false, true} {
		heldir.UseOpenat(openat)
		job := jobDir(t)
		heldir.AfterMkdir(func(parent int, name string) {
			if name == "otel" {
				_ = os.Rename(filepath.Join(job, "otel"), filepath.Join(job, ".stolen"))
			}
		})
		_, err := heldir.Open(job, filepath.Join(job, "otel"), 0o700)
		heldir.AfterMkdir(nil)
		if err == nil || !strings.Contains(err.Error(), "was moved or removed between its making and its opening") {
			t.Errorf("openat %v: %v, want the move refused", openat, err)
		}
		if _, err := os.Lstat(filepath.Join(job, "otel")); err == nil {
			t.Errorf("openat %v: otel made again after the move", openat)
		}
		empty(t, filepath.Join(job, ".stolen"))
	}
	heldir.UseOpenat(false)
}

// A link put in place of otel after its making, and removed again right
// after the open refused it (the race another user who writes the parent
// runs), is refused saying the dir was replaced, not that it is "not a
// directory"; with openat2 and with openat(O_NOFOLLOW).
func TestReplacedWhileOpeningRefused(t *testing.T) {
	for _, openat := range []bool{false, true} {
		heldir.UseOpenat(openat)
		job := jobDir(t)
		elsewhere := t.TempDir()
		heldir.AfterMkdir(func(parent int, name string) {
			if name == "otel" {
				_ = os.Rename(filepath.Join(job, "otel"), filepath.Join(job, ".stolen"))
				_ = os.Symlink(elsewhere, filepath.Join(job, "otel"))
			}
		})
		heldir.BeforeLook(func(parent int, name string) { _ = os.Remove(filepath.Join(job, "otel")) })
		_, err := heldir.Open(job, filepath.Join(job, "otel"), 0o700)
		heldir.AfterMkdir(nil)
		heldir.BeforeLook(nil)
		if err == nil || !strings.Contains(err.Error(), "was replaced while it was being opened") {
			t.Errorf("openat %v: %v, want the replacement refused", openat, err)
		}
		empty(t, elsewhere)
		empty(t, filepath.Join(job, ".stolen"))
	}
	heldir.UseOpenat(false)
}
