package supervise

// The node's host power from hwmon, read by the supervisor itself.
//
// Where the plugstack chooses it (host_power=hwmon, or auto on a node
// where root found no RAPL zone: launch.EnvHostPower), the supervisor
// finds the node's power meter under the hwmon class (launch.ScanHwmon)
// and reads its powerM_average (else powerM_input; µW) as the job's user
// at every reading of the node (nodemetrics.go), pushed as
// vocab.HostPowerWatts (W).
// The ACPI power meter's attributes are world-readable (drivers/hwmon/
// acpi_power_meter.c: mode 0444), so root hands nothing down, and nothing
// here reads what any user of the node could not. Only the power_meter
// chip is served; the other chips' power sensors (a GPU driver's, counted
// by dcgm-exporter already) are named in the log, not read. It is the
// node's power, not the job's: inspect attributes it to the job only as
// the node's whole.

import (
	"fmt"
	"strings"
	"sync"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// hwmonRoot is where the supervisor finds the hwmon power sensors: the
// kernel's hwmon class. Only the tests' build (tag gymotel_hwmon_test)
// and this package's tests point it elsewhere; nothing a user or a site
// sets reaches it.
var hwmonRoot = launch.HwmonRoot

// hwmonPower serves the node's power meter's sensors.
type hwmonPower struct {
	mu      sync.Mutex
	sensors []launch.HwmonSensor
	why     []string // a sensor's last read's error ("" none)
	warn    func(string, ...any)
}

// newHwmonPower scans root (launch.ScanHwmon) and keeps the power meter's
// sensors; it logs (info) what it serves and the sensors it lists but
// does not serve, and warns of what it could not read. nil when the node
// has no power meter sensor.
func newHwmonPower(root string, info, warn func(string, ...any)) *hwmonPower {
	scan, err := launch.ScanHwmon(root)
	if err != nil && warn != nil {
		warn("host power (hwmon): %v", err)
	}
	if len(scan.Listed) > 0 && info != nil {
		var l []string
		for _, s := range scan.Listed {
			l = append(l, s.Chip+" "+s.Hwmon+" "+s.Attr)
		}
		info("host power (hwmon): not read (a GPU's is dcgm-exporter's; other chips are parts of the node): %s", strings.Join(l, ", "))
	}
	if len(scan.Added) == 0 {
		if info != nil {
			info("host power (hwmon): no %s chip under %s: no host power on this node", launch.HwmonNodeChip, root)
		}
		return nil
	}
	if info != nil {
		var l []string
		for _, s := range scan.Added {
			d := s.Chip + " " + s.Hwmon + " " + s.Attr
			if s.IntervalMs > 0 {
				d += fmt.Sprintf(" (averaged over %d ms)", s.IntervalMs)
			}
			l = append(l, d)
		}
		info("host power (hwmon): reading %s", strings.Join(l, ", "))
	}
	return &hwmonPower{sensors: scan.Added, why: make([]string, len(scan.Added)), warn: warn}
}

// families reads every sensor now and returns one vocab.HostPowerWatts
// point per sensor read (W); a sensor whose read fails is absent (and
// warned of once until a read succeeds again). None from a nil h.
func (h *hwmonPower) families() []family {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	f := family{name: vocab.HostPowerWatts, help: "The node's power by hwmon sensor of its power meter (powerM_average, else powerM_input), watts (the node's, not the job's)."}
	for i, s := range h.sensors {
		v, err := launch.ReadHwmonWatts(s.Path)
		if err != nil {
			if h.why[i] == "" && h.warn != nil {
				h.warn("host power (hwmon): %s %s %s: %v (its series is absent until a read succeeds)", s.Chip, s.Hwmon, s.Sensor, err)
			}
			h.why[i] = err.Error()
			continue
		}
		h.why[i] = ""
		f.points = append(f.points, point{labels: [][2]string{{"chip", s.Chip}, {"hwmon", s.Hwmon}, {"sensor", s.Sensor}}, value: v})
	}
	if len(f.points) == 0 {
		return nil
	}
	return []family{f}
}
