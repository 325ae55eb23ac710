package launch

// The node's host energy counters (RAPL's powercap zones), opened by root
// and handed down.
//
// The kernel's powercap class (Documentation/ABI/testing/
// sysfs-class-powercap; drivers/powercap/intel_rapl_common.c, Linux
// v6.12) gives each RAPL zone a directory /sys/class/powercap/
// intel-rapl:<package>[:<subzone>] with name (package-<N>, or
// package-<N>-die-<M> on multi-die parts; a subzone's core, uncore or dram;
// psys, the platform), energy_uj (the zone's energy counter, µJ, which
// wraps to zero past max_energy_range_uj) and max_energy_range_uj (the
// counter's range, µJ). Since Linux 5.10 (commit 949dd0104c49,
// "powercap: restrict energy meter to root access", CVE-2020-8694, the
// Platypus power side channel) energy_uj is mode 0400: only root reads
// it. So the plugin's prolog, as root and only where the site opts in
// (plugstack host_power=rapl), opens each zone's energy_uj read-only and
// hands the descriptors to the supervisor, which reads them through those
// descriptors alone (pread at offset 0) and never opens a powercap path
// itself. max_energy_range_uj stays 0444; root reads it once and passes
// it with the descriptor.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// PowercapRoot is the kernel's powercap class, where root opens the RAPL
// zones (OpenRAPL's root in production).
const PowercapRoot = "/sys/class/powercap"

// EnvHostEnergy is the supervisor's environment variable naming the host
// energy descriptors root handed it (FormatEnergyZones): set by the
// plugin's prolog only where it opened RAPL zones.
const EnvHostEnergy = "GYM_OTEL_HOST_ENERGY"

// MaxEnergyZones bounds the zones root opens on one node (a two-socket
// node has 2 packages with up to 3 subzones each, and psys).
const MaxEnergyZones = 32

// EnergyZone is one RAPL zone's energy counter: its name, its open
// energy_uj (read-only; root's copy in the prolog, the supervisor's once
// handed down) and its range.
type EnergyZone struct {
	// Name is the zone's name as the kernel gives it (package-0, psys),
	// a subzone's joined to its parent's by "/" (package-0/dram).
	Name string
	// File is energy_uj, opened read-only.
	File *os.File
	// MaxUJ is max_energy_range_uj (µJ): the counter wraps to zero past it.
	MaxUJ uint64
}

// OpenRAPL opens the energy_uj of every RAPL zone and subzone under root
// (the intel-rapl:* directories; intel-rapl-mmio:* repeats a package's
// domain and is left out), read-only, in name order, at most
// MaxEnergyZones. A zone whose files cannot be read is left out and named
// in the returned error (joined); no zone at all is not an error (a node
// without RAPL: nil, nil). The caller closes the files.
func OpenRAPL(root string) ([]EnergyZone, error) {
	dirs, err := filepath.Glob(filepath.Join(root, "intel-rapl:*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(dirs)
	names := map[string]string{} // dir base -> zone name
	var zones []EnergyZone
	var errs []error
	for _, d := range dirs {
		base := filepath.Base(d)
		name, err := zoneName(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		names[base] = name
		if i := strings.LastIndexByte(base, ':'); strings.Count(base, ":") > 1 && i > 0 {
			if p, ok := names[base[:i]]; ok {
				name = p + "/" + name
			} else {
				name = base[:i] + "/" + name
			}
		}
		if len(zones) == MaxEnergyZones {
			errs = append(errs, fmt.Errorf("%s: more than %d RAPL zones: not opened", d, MaxEnergyZones))
			continue
		}
		maxUJ, err := readUint(filepath.Join(d, "max_energy_range_uj"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if maxUJ == 0 {
			errs = append(errs, fmt.Errorf("%s: max_energy_range_uj is 0", d))
			continue
		}
		f, err := os.OpenFile(filepath.Join(d, "energy_uj"), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			f.Close()
			errs = append(errs, fmt.Errorf("%s: not a regular file", f.Name()))
			continue
		}
		if _, err := ReadEnergyUJ(f); err != nil {
			f.Close()
			errs = append(errs, err)
			continue
		}
		zones = append(zones, EnergyZone{Name: name, File: f, MaxUJ: maxUJ})
	}
	return zones, errors.Join(errs...)
}

// zoneName reads a zone directory's name file: letters, digits, '-', '_'
// and '.', at most 64 bytes. Errors name the file and the value.
func zoneName(dir string) (string, error) {
	b, err := readSmall(filepath.Join(dir, "name"))
	if err != nil {
		return "", err
	}
	n := strings.TrimSpace(string(b))
	if !validZoneName(n) {
		return "", fmt.Errorf("%s: zone name %q: want letters, digits, '-', '_' or '.', at most 64", filepath.Join(dir, "name"), n)
	}
	return n, nil
}

func validZoneName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 128))
}

func readUint(path string) (uint64, error) {
	b, err := readSmall(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a count of µJ", path, strings.TrimSpace(string(b)))
	}
	return v, nil
}

// ReadEnergyUJ reads an open energy_uj afresh (pread at offset 0, as sysfs
// regenerates an attribute at each read from its start): the counter in
// µJ. Errors name the file and the value.
func ReadEnergyUJ(f *os.File) (uint64, error) {
	var buf [32]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("%s: %w", f.Name(), err)
	}
	s := strings.TrimSpace(string(buf[:n]))
	v, perr := strconv.ParseUint(s, 10, 64)
	if perr != nil {
		return 0, fmt.Errorf("%s: %q is not a count of µJ", f.Name(), s)
	}
	return v, nil
}

// EnergyDeltaUJ is the energy (µJ) between two reads of a zone's counter,
// prev then cur, whose range is maxUJ: cur - prev, or past a wrap (cur <
// prev) maxUJ - prev + cur. The kernel gives the range as the hardware
// counter's largest value, so a wrap adds one counter unit (about 61 µJ
// on Intel) that is not counted; more than one wrap between two reads
// (about 260 kJ per package: over 20 minutes at 200 W) cannot be seen,
// which the supervisor's sampling at the scrape interval rules out.
func EnergyDeltaUJ(prev, cur, maxUJ uint64) uint64 {
	if cur >= prev {
		return cur - prev
	}
	if prev > maxUJ {
		return cur // a range that does not hold the counter: from zero
	}
	return maxUJ - prev + cur
}

// FormatEnergyZones is EnvHostEnergy's value for zones handed to the
// supervisor at descriptors firstFD, firstFD+1, ...: "fd:name:max" per
// zone, comma separated.
func FormatEnergyZones(zones []EnergyZone, firstFD int) string {
	parts := make([]string, len(zones))
	for i, z := range zones {
		parts[i] = fmt.Sprintf("%d:%s:%d", firstFD+i, z.Name, z.MaxUJ)
	}
	return strings.Join(parts, ",")
}

// EnergyZoneFD is one entry of EnvHostEnergy: the descriptor the zone's
// energy_uj was handed on, its name and range (µJ).
type EnergyZoneFD struct {
	FD    int
	Name  string
	MaxUJ uint64
}

// ParseEnergyZones reads EnvHostEnergy's value (FormatEnergyZones). Errors
// name the variable and the entry at fault: not fd:name:max, a descriptor
// below 3 or twice, a name FormatEnergyZones would not write, a range of
// 0, more than MaxEnergyZones entries.
func ParseEnergyZones(v string) ([]EnergyZoneFD, error) {
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > MaxEnergyZones {
		return nil, fmt.Errorf("%s: %d zones, at most %d", EnvHostEnergy, len(parts), MaxEnergyZones)
	}
	var out []EnergyZoneFD
	seen := map[int]bool{}
	for _, p := range parts {
		f := strings.Split(p, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: %q is not fd:name:max_energy_range_uj", EnvHostEnergy, p)
		}
		fd, err := strconv.Atoi(f[0])
		if err != nil || fd < 3 || fd > 1<<20 || seen[fd] {
			return nil, fmt.Errorf("%s: %q: %q is not a distinct descriptor above 2", EnvHostEnergy, p, f[0])
		}
		seen[fd] = true
		name := f[1]
		ok := name != ""
		for _, part := range strings.Split(name, "/") {
			ok = ok && validZoneName(part)
		}
		if !ok || strings.Count(name, "/") > 1 {
			return nil, fmt.Errorf("%s: %q: zone name %q", EnvHostEnergy, p, name)
		}
		maxUJ, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil || maxUJ == 0 {
			return nil, fmt.Errorf("%s: %q: %q is not a positive range in µJ", EnvHostEnergy, p, f[2])
		}
		out = append(out, EnergyZoneFD{FD: fd, Name: name, MaxUJ: maxUJ})
	}
	return out, nil
}
