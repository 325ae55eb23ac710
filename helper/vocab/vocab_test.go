package vocab

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestUserGuidePhaseTable: the user guide's table of phase spans (the
// rows after "| span | from | to |") names every span of Spans but the
// aggregate, which the text under it explains, and no span that is not in
// Spans; the aggregate is named there too.
func TestUserGuidePhaseTable(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "docs", "user-guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	guide := string(b)
	i := strings.Index(guide, "| span | from | to |")
	if i < 0 {
		t.Fatal("docs/user-guide.md has no table of phase spans (| span | from | to |)")
	}
	var rows []string
	for _, line := range strings.Split(guide[i:], "\n")[2:] {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "| `"), "`")
		rows = append(rows, name)
	}
	for _, s := range Spans {
		if s == SpanStepsAggregated {
			if !strings.Contains(guide[i:], "`"+s+"`") {
				t.Errorf("the user guide does not name %s after its phase table", s)
			}
			continue
		}
		if !slices.Contains(rows, s) {
			t.Errorf("the user guide's phase table has no row for %s", s)
		}
	}
	for _, r := range rows {
		if !slices.Contains(Spans, r) {
			t.Errorf("the user guide's phase table names %s, which the supervisor does not write", r)
		}
	}
}
