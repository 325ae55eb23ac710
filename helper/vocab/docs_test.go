package vocab

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// repoFile reads the file at rel from the repository's root.
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// words is every string constant of vocab.go: the vocabulary as written.
func words(t *testing.T) map[string]bool {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(filepath.Dir(here), "vocab.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	w := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for _, v := range vs.Values {
				if bl, ok := v.(*ast.BasicLit); ok && bl.Kind == token.STRING {
					s, _ := strconv.Unquote(bl.Value)
					w[s] = true
				}
			}
		}
		return true
	})
	return w
}

// expand expands a name's brace lists ("a_{b,c}_d": a_b_d, a_c_d).
func expand(name string) []string {
	i := strings.Index(name, "{")
	j := strings.Index(name, "}")
	if i < 0 || j < i {
		return []string{name}
	}
	var out []string
	for _, alt := range strings.Split(name[i+1:j], ",") {
		out = append(out, expand(name[:i]+alt+name[j+1:])...)
	}
	return out
}

// tableRows returns the rows of the markdown table whose header line is
// header, each row's cells (trimmed); it fails the test without one.
func tableRows(t *testing.T, doc, header string) [][]string {
	t.Helper()
	i := strings.Index(doc, header+"\n")
	if i < 0 {
		t.Fatalf("no table %q", header)
	}
	var rows [][]string
	for _, line := range strings.Split(doc[i:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), " | ") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows = append(rows, cells)
	}
	return rows
}

// quoted is every `...` of s, in order.
func quoted(s string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// sameSet reports what is in got and not in want, and the reverse.
func sameSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("%s names %q, which vocab does not have", what, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s does not name %q", what, w)
		}
	}
}

// TestUserGuideCgroupTable: the user guide's table of the cgroup metrics
// (the rows after "| metric | from (v1 / v2) |", brace lists expanded)
// names exactly CgroupMetricFamilies, and the series of what is not kept
// is named under it.
func TestUserGuideCgroupTable(t *testing.T) {
	guide := repoFile(t, "docs/user-guide.md")
	var got []string
	for _, r := range tableRows(t, guide, "| metric | from (v1 / v2) |") {
		for _, q := range quoted(r[0]) {
			got = append(got, expand(q)...)
		}
	}
	sameSet(t, "the user guide's cgroup table", got, CgroupMetricFamilies)
	if !strings.Contains(guide, "`"+CgroupNotKept+"{") {
		t.Errorf("the user guide does not name %s", CgroupNotKept)
	}
}

// TestUserGuideCgroupLabels: the user guide names the cgroup readings' producer,
// the groups of the cgroup label, the labels of CgroupNotKept as served
// (CgroupLabels, in order) and its families (CgroupFamilies and
// CgroupFamilyAll), as vocab spells them.
func TestUserGuideCgroupLabels(t *testing.T) {
	guide := repoFile(t, "docs/user-guide.md")
	if !strings.Contains(guide, "as the producer\n`"+CgroupProducer+"`") && !strings.Contains(guide, "as the producer `"+CgroupProducer+"`") {
		t.Errorf("the user guide does not name the producer %q", CgroupProducer)
	}
	i := strings.Index(guide, "attribute `"+LabelCgroup+"`:")
	if i < 0 {
		t.Fatalf("the user guide does not say what the attribute %q holds", LabelCgroup)
	}
	para := guide[i:]
	para = para[:strings.Index(para, "\n\n")]
	for _, g := range CgroupGroups {
		if !strings.Contains(para, "`"+g+"`") {
			t.Errorf("the user guide's %s attribute does not name the group %q", LabelCgroup, g)
		}
	}
	if !strings.Contains(para, "(with `"+LabelStep+"`:") {
		t.Errorf("the user guide does not name the label %q of a step's group", LabelStep)
	}
	m := regexp.MustCompile("`" + CgroupNotKept + `\{([^}]*)\} 1` + "`").FindStringSubmatch(guide)
	if m == nil {
		t.Fatalf("the user guide does not give %s's labels", CgroupNotKept)
	}
	if got := strings.Split(m[1], ", "); !slices.Equal(got, CgroupLabels) {
		t.Errorf("the user guide gives %s labels %q, vocab %q", CgroupNotKept, got, CgroupLabels)
	}
	j := strings.Index(guide, "(`"+LabelFamily+"` one of")
	if j < 0 {
		t.Fatalf("the user guide does not list the %s label's families", LabelFamily)
	}
	list := guide[j+len("(`"+LabelFamily+"` one of"):]
	list = list[:strings.Index(list, ")")]
	sameSet(t, "the user guide's list of families", quoted(list), append(slices.Clone(CgroupFamilies), CgroupFamilyAll))
}

// TestUserGuideGPUEnergyTable: the user guide's table of the GPU energy
// metrics (the rows after "| metric | type, unit | one point per |
// attributes |") names exactly GPUEnergyMetrics, and its attribute column
// exactly GPUEnergyAttrs (the keys: the quoted words with a dot).
func TestUserGuideGPUEnergyTable(t *testing.T) {
	guide := repoFile(t, "docs/user-guide.md")
	var metrics, attrs []string
	for _, r := range tableRows(t, guide, "| metric | type, unit | one point per | attributes |") {
		if len(r) != 4 {
			t.Fatalf("a row of %d cells: %q", len(r), r)
		}
		metrics = append(metrics, quoted(r[0])...)
		for _, q := range quoted(r[3]) {
			if strings.Contains(q, ".") && !slices.Contains(attrs, q) {
				attrs = append(attrs, q)
			}
		}
	}
	sameSet(t, "the user guide's GPU energy table", metrics, GPUEnergyMetrics)
	sameSet(t, "the user guide's GPU energy attributes", attrs, GPUEnergyAttrs)
}

// notVocab are the names in the docs that begin like the plugin's telemetry
// but are not telemetry, each with its home.
var notVocab = map[string]string{
	"gym_otel_core":         "the Go core's file, gym_otel_core.so, and its header",
	"gym_otel_step":         "the step-only plugin's file, gym_otel_step.so",
	"gym_otel_contract":     "the generated header, include/gym_otel_contract.h",
	"gym_otel_phase":        "the scrape jobs' query parameter (render.PhaseParam)",
	"gym_otel_spank":        "the phase spans' emitter (contract.EmitterPhases)",
	"cgroup_memory_max_mib": "a plugstack argument (callbacks.ArgNames)",
	"cgroup_points":         "a field of inspect's JSON (job_lookalikes)",
}

// docName finds the plugin's telemetry names in markdown: cgroup_* and
// gym_otel_* (with brace lists after an underscore, <placeholders> and a
// trailing *), and gym_otel.gpu.* and gym_otel.energy.*. Braces right
// after a word's letter are a series' labels (Prometheus' form,
// "gym_otel_host_power_watts{chip,hwmon,sensor}"), not a list: the name
// ends there.
var docName = regexp.MustCompile(`(^|[^A-Za-z0-9_./-])((?:cgroup|gym_otel)_(?:_\{[a-z0-9_]+(?:,[a-z0-9_]+)+\}|[a-z0-9_*<>])+|gym_otel\.(?:gpu|energy)[a-z0-9_.]*)`)

// TestDocsEnergyAndCgroupNames: every cgroup_*, gym_otel_* and GPU energy
// name the docs (docs/*.md and the README) write is a word of vocab (a
// name ending in * or holding a <placeholder>: some word of vocab
// matches it), or one of notVocab: a rename in vocab that misses the docs
// fails here.
func TestDocsEnergyAndCgroupNames(t *testing.T) {
	w := words(t)
	var known []string
	for s := range w {
		known = append(known, s)
	}
	sort.Strings(known)
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	seen := 0
	for _, path := range append(docs, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range docName.FindAllStringSubmatch(string(b), -1) {
			for _, name := range expand(strings.TrimRight(m[2], "._")) {
				seen++
				if w[name] || notVocab[name] != "" {
					continue
				}
				if strings.ContainsAny(name, "*<") {
					re := regexp.MustCompile("^" + regexp.MustCompile(`<[^>]*>|\\\*`).ReplaceAllString(regexp.QuoteMeta(name), `[a-z0-9_.]+`) + "$")
					if slices.ContainsFunc(known, re.MatchString) {
						continue
					}
				}
				t.Errorf("%s names %q, which is not a word of vocab", filepath.Base(path), name)
			}
		}
	}
	if seen == 0 {
		t.Fatal("the docs name no cgroup or energy metric")
	}
}
