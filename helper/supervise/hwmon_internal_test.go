package supervise

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// TestHwmonPage: on a node whose hwmon class has a power meter (its files
// under hwmon<N>/device, as the ACPI driver registers them) and a GPU
// driver's power sensor, a reading has one gauge series, the meter's,
// in W with its chip, hwmon and sensor labels, read afresh at each
// reading; the GPU's is not read. A sensor that stops reading is
// absent, and back once it reads again. A node without a power meter
// serves nothing (nil).
func TestHwmonPage(t *testing.T) {
	root := t.TempDir()
	write := func(rel, v string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hwmon0/name", "amdgpu")
	write("hwmon0/power1_average", "95000000")
	write("hwmon3/device/name", "power_meter")
	write("hwmon3/device/power1_average", "215000000")
	write("hwmon3/device/power1_average_interval", "1000")
	var logged []string
	logf := func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	hw := newHwmonPower(root, logf, t.Errorf)
	if hw == nil {
		t.Fatal("no power meter found")
	}
	if l := strings.Join(logged, "\n"); !strings.Contains(l, "amdgpu hwmon0 power1_average") || !strings.Contains(l, "power_meter hwmon3 power1_average (averaged over 1000 ms)") {
		t.Errorf("log:\n%s\nwant the GPU's sensor listed and the meter's served", l)
	}
	page := func() string { return readingText(hw.families()) }
	series := vocab.HostPowerWatts + `{chip="power_meter",hwmon="hwmon3",sensor="power1"} `
	p := page()
	if !strings.Contains(p, "# TYPE "+vocab.HostPowerWatts+" gauge\n") || !strings.Contains(p, series+"215\n") || strings.Contains(p, "amdgpu") || strings.Count(p, vocab.HostPowerWatts+"{") != 1 {
		t.Errorf("page:\n%s\nwant the meter's 215 W alone", p)
	}
	write("hwmon3/device/power1_average", "187654321")
	if p := page(); !strings.Contains(p, series+"187.654321\n") {
		t.Errorf("page after the meter changed:\n%s\nwant 187.654321 W", p)
	}
	hw.warn = t.Logf
	write("hwmon3/device/power1_average", "unavailable")
	if p := page(); strings.Contains(p, series) {
		t.Errorf("page with an unreadable sensor:\n%s\nwant its series absent", p)
	}
	write("hwmon3/device/power1_average", "1000000")
	if p := page(); !strings.Contains(p, series+"1\n") {
		t.Errorf("page once it reads again:\n%s", p)
	}
	if newHwmonPower(filepath.Join(root, "hwmon0"), nil, nil) != nil {
		t.Error("a tree without a power meter: want nil")
	}
}
