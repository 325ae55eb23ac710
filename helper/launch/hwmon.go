package launch

// The node's host power from hwmon, read by the supervisor itself.
//
// The kernel's hwmon class (Documentation/hwmon/sysfs-interface.rst,
// "Power", Linux v6.12) gives each chip a directory /sys/class/hwmon/
// hwmon<N> with name (the chip's driver, e.g. power_meter, amdgpu,
// nouveau) and per power sensor M: powerM_average (the average power over
// powerM_average_interval, µW), powerM_average_interval (ms) and
// powerM_input (the instantaneous power, µW). The ACPI 4.0 power meter
// (drivers/hwmon/acpi_power_meter.c, Documentation/hwmon/
// acpi_power_meter.rst) names its chip power_meter and measures the whole
// node (power1_average over power1_average_interval). It registers with
// the deprecated hwmon_device_register, so its name and power1_* files
// are the ACPI device's, hwmon<N>/device/, where libsensors looks too
// when hwmon<N> has no name. Its register_attrs creates every attribute
// mode 0444 (0644 for the settable interval, cap and trip points):
// world-readable, so, unlike RAPL's energy_uj (root's alone
// since CVE-2020-8694, OpenRAPL), nothing is handed down: the supervisor
// opens them by path as the job's user, the same files any user of the
// node can read. Where the plugstack chooses it (host_power=hwmon, or auto
// on a node without RAPL) the prolog names the choice in EnvHostPower.
//
// Only the power_meter chip is added to the host figure: a GPU driver's
// sensors (amdgpu, nouveau, ...) count a GPU dcgm-exporter counts already,
// and other chips' sensors (a voltage regulator's, a PSU's rail) are parts
// of the node or of unknown scope, so they are listed, not added.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// HwmonRoot is the kernel's hwmon class, where the supervisor finds the
// node's power sensors (ScanHwmon's root in production).
const HwmonRoot = "/sys/class/hwmon"

// EnvHostPower is the supervisor's environment variable naming the host
// power source it reads itself: HostPowerHwmon, set by the plugin's
// prolog where the plugstack chose hwmon (host_power=hwmon, or auto on a
// node where root found no RAPL zone). Unset: none.
const EnvHostPower = "GYM_OTEL_HOST_POWER"

// HostPowerHwmon is EnvHostPower's value: read hwmon's power sensors.
const HostPowerHwmon = "hwmon"

// HwmonNodeChip is the name of the chip whose sensors are the node's
// power and are added: the ACPI power meter's (drivers/hwmon/
// acpi_power_meter.c, ACPI_POWER_METER_NAME).
const HwmonNodeChip = "power_meter"

// MaxHwmonChips bounds the chips ScanHwmon looks at; MaxHwmonSensors the
// power sensors of one chip.
const (
	MaxHwmonChips   = 64
	MaxHwmonSensors = 16
)

// HwmonSensor is one hwmon power sensor.
type HwmonSensor struct {
	// Chip is the chip's name file (power_meter, amdgpu, ...).
	Chip string
	// Hwmon is the chip's directory under the class (hwmon0, ...).
	Hwmon string
	// Sensor is the sensor's prefix (power1, ...).
	Sensor string
	// Attr is the file read: powerM_average where the chip has it, else
	// powerM_input (both µW).
	Attr string
	// Path is Attr's path under the root ScanHwmon was given
	// (hwmon<N>/Attr, or hwmon<N>/device/Attr).
	Path string
	// IntervalMs is powerM_average_interval (ms) for an average, 0 where
	// the chip does not give it or Attr is powerM_input.
	IntervalMs uint64
}

// HwmonScan is what ScanHwmon found on a node.
type HwmonScan struct {
	// Added are the node's power sensors (chip HwmonNodeChip), read and
	// served as the node's power.
	Added []HwmonSensor
	// Listed are the other chips' power sensors (GPU drivers', voltage
	// regulators'): named in the supervisor's log, never served.
	Listed []HwmonSensor
}

// ScanHwmon finds the power sensors under root (the hwmon class): per
// chip directory hwmon<N> (in natural order, at most MaxHwmonChips), its
// name (in hwmon<N>, else in hwmon<N>/device, whose files are then the
// chip's) and each sensor M with a readable powerM_average (preferred) or
// powerM_input (at most MaxHwmonSensors per chip). A sensor is Added when
// its chip is HwmonNodeChip, else Listed. A chip or sensor that cannot be
// read is left out and named in the returned error (joined); no chip at
// all is not an error (an empty scan, nil).
func ScanHwmon(root string) (HwmonScan, error) {
	var scan HwmonScan
	dirs, err := filepath.Glob(filepath.Join(root, "hwmon*"))
	if err != nil {
		return scan, err
	}
	sort.Slice(dirs, func(i, j int) bool { return hwmonLess(filepath.Base(dirs[i]), filepath.Base(dirs[j])) })
	var errs []error
	for n, d := range dirs {
		if n == MaxHwmonChips {
			errs = append(errs, fmt.Errorf("%s: more than %d hwmon chips: the rest not read", root, MaxHwmonChips))
			break
		}
		base := filepath.Base(d)
		if _, err := strconv.Atoi(strings.TrimPrefix(base, "hwmon")); err != nil {
			continue
		}
		// The chip's files: hwmon<N>'s own, else (a driver registered
		// on its device, as the ACPI power meter is) its device's.
		files := d
		b, err := readSmall(filepath.Join(d, "name"))
		if err != nil {
			files = filepath.Join(d, "device")
			if b, err = readSmall(filepath.Join(files, "name")); err != nil {
				continue // no name: no sensors the class documents
			}
		}
		chip := strings.TrimSpace(string(b))
		if !validZoneName(chip) {
			errs = append(errs, fmt.Errorf("%s: chip name %q: want letters, digits, '-', '_' or '.', at most 64", filepath.Join(files, "name"), chip))
			continue
		}
		sensors, err := chipSensors(files, chip, base)
		if err != nil {
			errs = append(errs, err)
		}
		for _, s := range sensors {
			if chip == HwmonNodeChip {
				scan.Added = append(scan.Added, s)
			} else {
				scan.Listed = append(scan.Listed, s)
			}
		}
	}
	return scan, errors.Join(errs...)
}

// chipSensors lists one chip directory's power sensors.
func chipSensors(dir, chip, base string) ([]HwmonSensor, error) {
	files, err := filepath.Glob(filepath.Join(dir, "power*_*"))
	if err != nil {
		return nil, err
	}
	idx := map[int]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		num, attr, ok := strings.Cut(strings.TrimPrefix(name, "power"), "_")
		m, err := strconv.Atoi(num)
		if !ok || err != nil || m < 1 || (attr != "average" && attr != "input") {
			continue
		}
		idx[m] = true
	}
	var ms []int
	for m := range idx {
		ms = append(ms, m)
	}
	sort.Ints(ms)
	var out []HwmonSensor
	var errs []error
	for _, m := range ms {
		if len(out) == MaxHwmonSensors {
			errs = append(errs, fmt.Errorf("%s: more than %d power sensors: the rest not read", dir, MaxHwmonSensors))
			break
		}
		sensor := fmt.Sprintf("power%d", m)
		s := HwmonSensor{Chip: chip, Hwmon: base, Sensor: sensor}
		var readErr error
		for _, attr := range []string{sensor + "_average", sensor + "_input"} {
			p := filepath.Join(dir, attr)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			if _, err := ReadHwmonWatts(p); err != nil {
				readErr = err
				continue
			}
			s.Attr, s.Path = attr, p
			break
		}
		if s.Attr == "" {
			if readErr != nil {
				errs = append(errs, fmt.Errorf("%s %s %s: %w", base, chip, sensor, readErr))
			}
			continue
		}
		if s.Attr == sensor+"_average" {
			if v, err := readUint(filepath.Join(dir, sensor+"_average_interval")); err == nil {
				s.IntervalMs = v
			}
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// hwmonLess orders hwmon<N> directories by N (hwmon2 before hwmon10).
func hwmonLess(a, b string) bool {
	na, ea := strconv.Atoi(strings.TrimPrefix(a, "hwmon"))
	nb, eb := strconv.Atoi(strings.TrimPrefix(b, "hwmon"))
	if ea != nil || eb != nil {
		return a < b
	}
	return na < nb
}

// ReadHwmonWatts reads a power attribute (powerM_average or powerM_input,
// µW as the class gives it) and returns watts. Errors name the file and
// the value.
func ReadHwmonWatts(path string) (float64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a count of µW", path, s)
	}
	return float64(v) / 1e6, nil
}
