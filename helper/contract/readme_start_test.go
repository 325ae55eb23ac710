package contract

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// anchor is GitHub's anchor of a Markdown heading.
func anchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(heading, "#")))
	h = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// TestREADMEFirstScreen: the README opens with the two make commands, then
// says where each reader starts (submit a job, read a run, install on a
// cluster, develop) within its first screen, every link to a file and
// heading that exists.
func TestREADMEFirstScreen(t *testing.T) {
	root := testenv.Root()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) < 25 || lines[2] != "```sh" || !strings.HasPrefix(lines[3], "make demo ") || !strings.HasPrefix(lines[4], "make test ") || lines[5] != "```" {
		t.Fatalf("the README does not open with the two make commands:\n%s", strings.Join(lines[:min(8, len(lines))], "\n"))
	}
	screen := strings.Join(lines[:25], "\n")
	for _, reader := range []string{"submit a job", "read a run", "install it on a cluster", "develop it"} {
		if !strings.Contains(screen, "**"+reader+"**") {
			t.Errorf("the README's first screen does not say where to start to %s", reader)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([^)#]*)(#[^)]*)?\)`).FindAllStringSubmatch(screen, -1) {
		file := filepath.Join(root, m[1])
		if m[1] == "" {
			file = filepath.Join(root, "README.md")
		}
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("link %s%s: %v", m[1], m[2], err)
			continue
		}
		if m[2] == "" {
			continue
		}
		found := false
		for _, l := range strings.Split(string(doc), "\n") {
			if strings.HasPrefix(l, "#") && "#"+anchor(l) == m[2] {
				found = true
			}
		}
		if !found {
			t.Errorf("link %s%s: no such heading", m[1], m[2])
		}
	}
}
