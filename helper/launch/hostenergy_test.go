package launch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
)

// TestEnergyDeltaUJ: the increase between two reads of a RAPL counter,
// across its wrap at max_energy_range_uj.
func TestEnergyDeltaUJ(t *testing.T) {
	const maxUJ = 262143328850 // an Intel package's range
	for _, c := range []struct{ prev, cur, want uint64 }{
		{1000, 1000, 0},
		{1000, 5000, 4000},
		{maxUJ - 1000, 500, 1500}, // wrapped once
		{maxUJ, 0, 0},             // at the top, then zero
		{0, maxUJ, maxUJ},         // a whole range without a wrap
		{maxUJ + 10, 300, 300},    // a range that does not hold the counter: from zero
		{262143328000, 850, 1700}, // 850 below the top, then 850 past zero
	} {
		if got := launch.EnergyDeltaUJ(c.prev, c.cur, maxUJ); got != c.want {
			t.Errorf("EnergyDeltaUJ(%d, %d): %d, want %d", c.prev, c.cur, got, c.want)
		}
	}
}

// writeZone writes a powercap zone directory as the kernel's class has it.
func writeZone(t *testing.T, root, dir, name string, energy, maxUJ string) {
	t.Helper()
	d := filepath.Join(root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"name": name + "\n", "energy_uj": energy + "\n", "max_energy_range_uj": maxUJ + "\n"} {
		mode := os.FileMode(0o444)
		if f == "energy_uj" {
			mode = 0o400 // root's only, since CVE-2020-8694
		}
		if err := os.WriteFile(filepath.Join(d, f), []byte(v), mode); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenRAPL: every intel-rapl zone and subzone is opened read-only and
// named as the kernel names it (a subzone after its package); the mmio
// zone, which repeats a package, is left out; a zone with a bad range is
// named in the error and the others still opened; the handed-down value
// reads back.
func TestOpenRAPL(t *testing.T) {
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0", "1000", "262143328850")
	writeZone(t, root, "intel-rapl:0:0", "core", "200", "262143328850")
	writeZone(t, root, "intel-rapl:0:1", "dram", "300", "65712999613")
	writeZone(t, root, "intel-rapl:1", "package-1", "4000", "262143328850")
	writeZone(t, root, "intel-rapl:2", "psys", "5000", "0")
	writeZone(t, root, "intel-rapl-mmio:0", "package-0", "1000", "262143328850")
	zones, err := launch.OpenRAPL(root)
	defer func() {
		for _, z := range zones {
			z.File.Close()
		}
	}()
	if err == nil || !strings.Contains(err.Error(), "intel-rapl:2: max_energy_range_uj is 0") {
		t.Errorf("error %v: want psys's range named", err)
	}
	var names []string
	for _, z := range zones {
		names = append(names, z.Name)
		fl, ferr := fcntlFlags(z.File)
		if ferr != nil || fl&os.O_WRONLY != 0 || fl&os.O_RDWR != 0 {
			t.Errorf("zone %s: flags %#o (%v): want read-only", z.Name, fl, ferr)
		}
	}
	if got := strings.Join(names, ","); got != "package-0,package-0/core,package-0/dram,package-1" {
		t.Fatalf("zones %s", got)
	}
	if v, err := launch.ReadEnergyUJ(zones[2].File); err != nil || v != 300 || zones[2].MaxUJ != 65712999613 {
		t.Errorf("dram: %d µJ, range %d (%v)", v, zones[2].MaxUJ, err)
	}
	// The counter read afresh at each read, from its start.
	if err := os.WriteFile(filepath.Join(root, "intel-rapl:0", "energy_uj"), []byte("123456789\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if v, err := launch.ReadEnergyUJ(zones[0].File); err != nil || v != 123456789 {
		t.Errorf("package-0 after a new value: %d (%v)", v, err)
	}
	env := launch.FormatEnergyZones(zones, 5)
	if env != "5:package-0:262143328850,6:package-0/core:262143328850,7:package-0/dram:65712999613,8:package-1:262143328850" {
		t.Errorf("%s=%s", launch.EnvHostEnergy, env)
	}
	back, err := launch.ParseEnergyZones(env)
	if err != nil || len(back) != 4 || back[2] != (launch.EnergyZoneFD{FD: 7, Name: "package-0/dram", MaxUJ: 65712999613}) {
		t.Errorf("parsed %+v (%v)", back, err)
	}
	// No RAPL on the node: nothing, and no error.
	if zs, err := launch.OpenRAPL(t.TempDir()); zs != nil || err != nil {
		t.Errorf("an empty class: %v, %v", zs, err)
	}
}

// TestParseEnergyZonesBad: every bad entry is refused with the variable
// and the entry named.
func TestParseEnergyZonesBad(t *testing.T) {
	for _, v := range []string{"5:package-0", "2:package-0:10", "x:package-0:10", "5:pack age:10", "5:a/b/c:10", "5:package-0:0",
		"5:package-0:10,5:dram:10", "5::10", "5:package-0:-1"} {
		if _, err := launch.ParseEnergyZones(v); err == nil || !strings.Contains(err.Error(), launch.EnvHostEnergy) {
			t.Errorf("%q: %v", v, err)
		}
	}
}
