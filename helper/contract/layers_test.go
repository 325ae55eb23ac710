package contract

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// layers is every Go package of the module (but the collector, a module
// of its own) by level: a package imports only packages of lower levels.
// A new package gets a level here, as low as what it imports allows.
var layers = map[string]int{
	// 0: writing a file whole, under the leaves that own files; the
	// plugin's telemetry vocabulary, the collector's memory policy and the
	// NVIDIA driver's GPU list, which import nothing; what the YAML readers
	// share (a key's lookup, a value's description, the nearest known name).
	"helper/atomicfile": 0,
	"helper/vocab":      0,
	"helper/memory":     0,
	"helper/gpudev":     0,
	"helper/yamlnode":   0,
	// 1: leaves: the names shared with C, the Gym submit schema, the job's files,
	// processes, receipts, the collector's own telemetry, Slurm's
	// commands; and the test kit.
	"helper/contract":    1,
	"internal/testenv":   1,
	"internal/otlptest":  1,
	"internal/jobgen":    1,
	"helper/jobdir":      1,
	"helper/proc":        1,
	"helper/cgroup":      1,
	"helper/receipt":     1,
	"helper/selfmetrics": 1,
	"helper/slurm":       1,
	"helper/portfilter":  1,
	"helper/heldir":      1,
	"helper/gymschema":   1,
	// 2: the otel: block (its layers, over the Gym config's schema).
	"helper/config": 2,
	// 3: what builds on one leaf or two: root's record, the timing policy,
	// the job's facts on a node, the supervisor's launch contract, the
	// delivery of a node dir's files to the backend from a checkpoint; the
	// header's generator.
	"helper/record":       3,
	"helper/delivery":     3,
	"helper/timing":       3,
	"helper/jobfacts":     3,
	"helper/launch":       3,
	"helper/contract/gen": 3,
	// 4: the collector's configuration, the task environment, inspect.
	"helper/render":  4,
	"helper/taskenv": 4,
	"helper/inspect": 4,
	// 5: what runs a collector with a rendered configuration: replay
	// (also the supervisor's sender of what it appends after the
	// collector's exit); the Slurm test kit (it reads inspect's report);
	// 6: the supervisor; 7: the plugin's hooks, the test harness that runs
	// the supervisor; 8: the programs.
	"helper/replay":      5,
	"internal/slurmkit":  5,
	"helper/supervise":   6,
	"helper/callbacks":   7,
	"internal/harness":   7,
	"cmd/gym-otel-spank": 8,
	"spank/core":         8,
}

// TestLayers: no package imports one of its own level or a higher one (an
// import against the grain; together with the levels this rules out
// cycles), and every package of the module has a level. Imports are read
// from the packages' non-test files.
func TestLayers(t *testing.T) {
	root := testenv.Root()
	const module = "github.com/gym-otel-spank/gym-otel-spank/"
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == "collector", rel == "tests", rel == "build", strings.HasPrefix(d.Name(), "."), d.Name() == "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		level, ok := layers[pkg]
		if !seen[pkg] && !ok {
			t.Errorf("%s has no level in layers (layers_test.go): give it one", pkg)
		}
		seen[pkg] = true
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			dep, inModule := strings.CutPrefix(p, module)
			if !inModule || !ok {
				continue
			}
			dl, known := layers[dep]
			if !known {
				continue // reported as a package of its own
			}
			if dl >= level {
				t.Errorf("%s (level %d) imports %s (level %d), against the grain: move what it needs down, or pass it in", rel, level, dep, dl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var gone []string
	for p := range layers {
		if !seen[p] {
			gone = append(gone, p)
		}
	}
	sort.Strings(gone)
	for _, p := range gone {
		t.Errorf("layers names %s, which has no Go file: take it out", p)
	}
}
