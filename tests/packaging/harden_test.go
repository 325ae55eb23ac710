package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestHardenedObjects: both shared objects that Slurm's root processes
// load are built hardened: full RELRO with immediate binding, no
// executable stack, and (the C front) the stack protector and fortified
// libc calls.
func TestHardenedObjects(t *testing.T) {
	readelf := testenv.Binary(t, "readelf", "/usr/bin/readelf")
	for _, so := range []string{"gym_otel.so", "gym_otel_core.so"} {
		p := filepath.Join(testenv.Root(), "build", so)
		if _, err := os.Stat(p); err != nil {
			testenv.Missing(t, p+" (make build)")
		}
		out, err := exec.Command(readelf, "-dlW", "--dyn-syms", p).CombinedOutput()
		if err != nil {
			t.Fatalf("readelf %s: %v\n%s", so, err, out)
		}
		text := string(out)
		if !regexp.MustCompile(`\(FLAGS\).*BIND_NOW`).MatchString(text) {
			t.Errorf("%s: not linked with -z now", so)
		}
		if !strings.Contains(text, "GNU_RELRO") {
			t.Errorf("%s: no RELRO segment", so)
		}
		if m := regexp.MustCompile(`GNU_STACK\s+(?:\S+\s+){5}(\S+)`).FindStringSubmatch(text); m == nil || strings.Contains(m[1], "E") {
			t.Errorf("%s: executable stack (or no GNU_STACK): %v", so, m)
		}
		if so == "gym_otel.so" {
			for _, sym := range []string{"__stack_chk_fail", "__snprintf_chk"} {
				if !strings.Contains(text, sym) {
					t.Errorf("%s: %s not imported: built without -fstack-protector-strong / _FORTIFY_SOURCE", so, sym)
				}
			}
		}
	}
}
