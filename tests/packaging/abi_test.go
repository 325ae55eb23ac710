package packaging

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// prototypeRE matches a gym_otel_core_* declaration: return type, name,
// parameter list.
var prototypeRE = regexp.MustCompile(`(?m)^(?:extern\s+)?(int|void)\s+(gym_otel_core_\w+)\s*\(([^)]*)\)\s*;`)

// prototypes reads the gym_otel_core_* declarations of a C header as
// "ret name(type, type, ...)": parameter names dropped, whitespace and
// const (cgo cannot say const) left out, so only what the ABI fixes stays.
func prototypes(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		testenv.Missing(t, path)
	}
	text := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAllString(string(data), "")
	out := map[string]string{}
	for _, m := range prototypeRE.FindAllStringSubmatch(text, -1) {
		var types []string
		for _, p := range strings.Split(m[3], ",") {
			p = strings.ReplaceAll(strings.TrimSpace(p), "const ", "")
			p = strings.ReplaceAll(p, "*", " * ")
			f := strings.Fields(p)
			if len(f) > 1 {
				f = f[:len(f)-1] // the parameter's name
			}
			types = append(types, strings.ReplaceAll(strings.Join(f, " "), " *", "*"))
		}
		out[m[2]] = m[1] + " " + m[2] + "(" + strings.Join(types, ", ") + ")"
	}
	return out
}

// TestCoreABI: the Go core's C ABI has one source. The C front takes the
// core's function types from include/gym_otel_core.h (spank/core.h),
// and that header must declare exactly what the core exports: the header
// cgo generates from the //export functions (build/gym_otel_core.h, make
// build) must list the same functions with the same types.
func TestCoreABI(t *testing.T) {
	root := testenv.Root()
	want := prototypes(t, filepath.Join(root, "include", "gym_otel_core.h"))
	got := prototypes(t, filepath.Join(root, "build", "gym_otel_core.h"))
	if len(want) == 0 {
		t.Fatal("include/gym_otel_core.h declares no gym_otel_core_* function")
	}
	names := func(m map[string]string) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	if strings.Join(names(want), " ") != strings.Join(names(got), " ") {
		t.Errorf("include/gym_otel_core.h declares %v, the core exports %v", names(want), names(got))
	}
	for name, w := range want {
		if g, ok := got[name]; ok && g != w {
			t.Errorf("%s:\n  include/gym_otel_core.h: %s\n  the core's exports:      %s", name, w, g)
		}
	}
}
