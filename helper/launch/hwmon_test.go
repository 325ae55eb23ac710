package launch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
)

// writeHwmon writes files (name -> content) under root/dir, mode 0444 as
// the hwmon drivers' read-only attributes are.
func writeHwmon(t *testing.T, root, dir string, files map[string]string) {
	t.Helper()
	for f, v := range files {
		p := filepath.Join(root, dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHwmonPower: over a tree written as the kernel's hwmon class has it,
// the ACPI power meter's sensors are added (its files under hwmon<N>/
// device, as the driver registers them; powerM_average preferred to
// powerM_input, with its interval; a meter with powerM_input alone read
// from it), a GPU driver's and a board chip's power sensors are listed
// and not added, chips come in hwmon<N> order (hwmon2 before hwmon10),
// and the µW of the files are read as W.
func TestHwmonPower(t *testing.T) {
	root := t.TempDir()
	writeHwmon(t, root, "hwmon0", map[string]string{"name": "amdgpu", "power1_average": "95000000", "power1_cap": "300000000"})
	writeHwmon(t, root, "hwmon1/device", map[string]string{"name": "power_meter", "power1_average": "215250000",
		"power1_average_interval": "1000", "power1_input": "1", "power1_accuracy": "95.0%", "power1_is_battery": "0"})
	writeHwmon(t, root, "hwmon2", map[string]string{"name": "nct6775", "power1_input": "12000000", "temp1_input": "45000"})
	writeHwmon(t, root, "hwmon10", map[string]string{"name": "power_meter", "power2_input": "12500000"})
	writeHwmon(t, root, "hwmon3", map[string]string{"name": "coretemp", "temp1_input": "45000"})
	scan, err := launch.ScanHwmon(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []launch.HwmonSensor{
		{Chip: "power_meter", Hwmon: "hwmon1", Sensor: "power1", Attr: "power1_average", Path: filepath.Join(root, "hwmon1/device/power1_average"), IntervalMs: 1000},
		{Chip: "power_meter", Hwmon: "hwmon10", Sensor: "power2", Attr: "power2_input", Path: filepath.Join(root, "hwmon10/power2_input")},
	}
	if len(scan.Added) != len(want) {
		t.Fatalf("added %+v, want %+v", scan.Added, want)
	}
	for i := range want {
		if scan.Added[i] != want[i] {
			t.Errorf("added[%d] %+v, want %+v", i, scan.Added[i], want[i])
		}
	}
	var listed []string
	for _, s := range scan.Listed {
		listed = append(listed, s.Chip+"/"+s.Hwmon+"/"+s.Attr)
	}
	if strings.Join(listed, " ") != "amdgpu/hwmon0/power1_average nct6775/hwmon2/power1_input" {
		t.Errorf("listed %v: want the GPU's and the board chip's sensors, not added", listed)
	}
	for _, c := range []struct {
		path string
		w    float64
	}{{want[0].Path, 215.25}, {want[1].Path, 12.5}} {
		if w, err := launch.ReadHwmonWatts(c.path); err != nil || w != c.w {
			t.Errorf("%s: %v W (%v), want %v", c.path, w, err, c.w)
		}
	}
	// A value that is not µW is refused, named; no hwmon class is no
	// sensor and no error.
	writeHwmon(t, root, "hwmon4", map[string]string{"name": "power_meter", "power1_average": "n/a"})
	if _, err := launch.ScanHwmon(root); err == nil || !strings.Contains(err.Error(), "hwmon4 power_meter power1") || !strings.Contains(err.Error(), `"n/a" is not a count of µW`) {
		t.Errorf("an unreadable sensor: %v", err)
	}
	if s, err := launch.ScanHwmon(filepath.Join(root, "none")); err != nil || len(s.Added)+len(s.Listed) != 0 {
		t.Errorf("no class: %+v, %v", s, err)
	}
}
