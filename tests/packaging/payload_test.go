// Package packaging checks what `make rpm` and `make man` produced: the RPM
// payload, its Release (the Slurm release it was built for) and that the man
// pages render.
package packaging

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

func rpmFile(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(testenv.Root(), "build", "rpm", "*", pattern))
	if len(m) != 1 {
		testenv.Missing(t, "build/rpm/*/"+pattern+" (make rpm)")
	}
	return m[0]
}

func rpmQuery(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("rpm", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rpm %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// slurmMajorMinor reads SLURM_VERSION_NUMBER from the slurm_version.h the
// build used, as the spec does.
func slurmMajorMinor(t *testing.T) string {
	data, err := os.ReadFile("/usr/include/slurm/slurm_version.h")
	if err != nil {
		testenv.Missing(t, "slurm_version.h")
	}
	m := regexp.MustCompile(`#define SLURM_VERSION_NUMBER (0x[0-9a-fA-F]+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("no SLURM_VERSION_NUMBER")
	}
	v, _ := strconv.ParseUint(string(m[1]), 0, 32)
	return fmt.Sprintf("%d.%02d", v>>16, (v>>8)&0xff)
}

func TestPluginPackage(t *testing.T) {
	rpm := rpmFile(t, "gym-otel-spank-0*.rpm")
	files := rpmQuery(t, "-qlp", rpm)
	for _, want := range []string{
		"/usr/lib64/slurm/gym_otel.so",
		"/usr/lib64/slurm/gym_otel_core.so",
		"/usr/bin/gym-otel-spank",
		"/etc/slurm/plugstack.conf.d/gym-otel.conf",
		"/etc/slurm/gym-otel.yaml.example",
		"/usr/share/man/man8/gym_otel.8",
		"/usr/share/man/man1/gym-otel-spank.1",
		"/usr/share/doc/gym-otel-spank/gym-otel-cap.lua",
	} {
		if !strings.Contains(files, want) {
			t.Errorf("payload lacks %s:\n%s", want, files)
		}
	}
	if strings.Contains(files, "otelcol-gym") {
		t.Error("the collector belongs to the -collector subpackage")
	}
	release := strings.TrimSpace(rpmQuery(t, "-qp", "--queryformat", "%{RELEASE}", rpm))
	if want := "slurm" + slurmMajorMinor(t); !strings.Contains(release, want) {
		t.Errorf("Release %q does not carry %q", release, want)
	}
	if cfg := rpmQuery(t, "-qcp", rpm); !strings.Contains(cfg, "/etc/slurm/plugstack.conf.d/gym-otel.conf") {
		t.Errorf("the plugstack snippet is not a %%config file: %s", cfg)
	}
}

func TestCollectorPackage(t *testing.T) {
	rpm := rpmFile(t, "gym-otel-spank-collector-*.rpm")
	if files := rpmQuery(t, "-qlp", rpm); strings.TrimSpace(files) != "/usr/bin/otelcol-gym" {
		t.Errorf("collector payload: %s", files)
	}
}

func TestManPagesRender(t *testing.T) {
	for _, page := range []string{"gym_otel.8", "gym-otel-spank.1"} {
		p := filepath.Join(testenv.Root(), "build", "man", page)
		if _, err := os.Stat(p); err != nil {
			testenv.Missing(t, p+" (make man)")
		}
		cmd := exec.Command("man", "-l", p)
		cmd.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=80")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("man -l %s: %v\n%s", page, err, out)
		}
		text := string(out)
		for _, want := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks section %s", page, want)
			}
		}
		if strings.Contains(text, "–") {
			t.Errorf("%s: an en dash where a flag's -- should be", page)
		}
	}
}

// Every otel key is documented in gym_otel(8) and in docs/configuration.md.
func TestEveryKeyDocumented(t *testing.T) {
	for _, doc := range []string{"docs/man/gym_otel.8.md", "docs/configuration.md"} {
		data, err := os.ReadFile(filepath.Join(testenv.Root(), doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range config.Keys() {
			if !strings.Contains(string(data), "**"+k+"**") && !strings.Contains(string(data), "`"+k+"`") {
				t.Errorf("%s: otel key %s is not documented", doc, k)
			}
		}
	}
}
