package plugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestHoldSampledC runs spank/hold.c (the batch step's reader of the
// sampled hint) compiled with a small driver: what ends the hold and what
// does not, including hostile content the job's user could write.
func TestHoldSampledC(t *testing.T) {
	dir := t.TempDir()
	bin := testenv.BuildCDriver(t, dir, "hold", "hold.c", `#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
int gos_hold_sampled(const char *dir, uid_t uid, long long since_ms);
int main(int argc, char **argv) {
	(void)argc;
	printf("%d\n", gos_hold_sampled(argv[1], (uid_t)atoi(argv[2]), atoll(argv[3])));
	return 0;
}
`)
	uid := strconv.Itoa(os.Getuid())
	hint := filepath.Join(dir, "sampled")
	for _, c := range []struct {
		name, text string
		uid        string
		since      string
		want       string
	}{
		{"sampled after the end", "targets=2\nsampled_ms=2000\n", uid, "1999", "1"},
		{"sampled at the end", "targets=2\nsampled_ms=2000\n", uid, "2000", "1"},
		{"sampled before the end", "targets=2\nsampled_ms=2000\n", uid, "2001", "0"},
		{"no targets", "targets=0\nsampled_ms=0\n", uid, "5000", "2"},
		{"not yet", "targets=1\nsampled_ms=0\n", uid, "5000", "0"},
		{"empty (the prolog's)", "", uid, "5000", "0"},
		{"a torn write", "targets=1\nsampled_ms=99", uid, "5", "0"},
		{"garbage", "targets=x\nsampled_ms=9999999999999\n", uid, "5", "0"},
		{"negative", "targets=-1\nsampled_ms=9999999999999\n", uid, "5", "0"},
		{"another owner", "targets=1\nsampled_ms=9999999999999\n", strconv.Itoa(os.Getuid() + 1), "5", "0"},
		{"past 256 bytes", strings.Repeat("#", 300) + "\ntargets=1\nsampled_ms=9999999999999\n", uid, "5", "0"},
	} {
		if err := os.WriteFile(hint, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, dir, c.uid, c.since).Output()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := strings.TrimSpace(string(out)); got != c.want {
			t.Errorf("%s: gos_hold_sampled = %s, want %s", c.name, got, c.want)
		}
	}
	// A symlink or a FIFO in its place is not read.
	os.Remove(hint)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, []byte("targets=0\n"), 0o600)
	os.Symlink(other, hint)
	if out, _ := exec.Command(bin, dir, uid, "5").Output(); strings.TrimSpace(string(out)) != "0" {
		t.Errorf("a symlink was followed: %s", out)
	}
	os.Remove(hint)
	if err := exec.Command("mkfifo", hint).Run(); err == nil {
		if out, _ := exec.Command(bin, dir, uid, "5").Output(); strings.TrimSpace(string(out)) != "0" {
			t.Errorf("a FIFO was read: %s", out)
		}
	}
}
