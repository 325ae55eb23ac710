package supervise

// The node's host energy (RAPL), from the descriptors root handed down.
//
// Where the site opts in (plugstack host_power=rapl), the plugin's prolog
// opens, as root, each RAPL zone's energy_uj read-only and hands the
// descriptors to this process (launch.OpenRAPL, launch.EnvHostEnergy;
// energy_uj is root's alone since CVE-2020-8694). The supervisor reads
// them through those descriptors only (pread at offset 0), never a path:
// it cannot open energy_uj itself, and nothing it is told names one. It
// reads every zone at min(scrape interval, hostEnergyMaxEvery) and at
// every reading of the node (nodemetrics.go), adds the increases between
// reads (a wrap past max_energy_range_uj handled: launch.EnergyDeltaUJ) and
// pushes their sum since its first read to the collector, which writes it
// into the job's files with the run's identity:
// vocab.HostEnergyJoules{zone} (J). It is the node's energy, not the
// job's: inspect attributes it to the job only as the node's whole.

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// hostEnergyMaxEvery bounds the time between two reads of a zone, so that
// its counter cannot wrap twice between them (a package's range is about
// 260 kJ: over 20 minutes at 200 W) whatever the scrape interval.
const hostEnergyMaxEvery = 60 * time.Second

// InheritedEnergyZones takes the RAPL zones root handed down, as v
// (launch.EnvHostEnergy's value) names them: each descriptor checked to
// be a regular file open read-only and readable as a count of µJ, made
// close-on-exec (the collector and anything else started never holds it)
// and returned as a file. A descriptor that fails a check is left alone
// and named in the error (joined); the others are returned. nil, nil when
// v is empty.
func InheritedEnergyZones(v string) ([]launch.EnergyZone, error) {
	fds, err := launch.ParseEnergyZones(v)
	if err != nil {
		return nil, err
	}
	var zones []launch.EnergyZone
	var errs []error
	for _, z := range fds {
		var st syscall.Stat_t
		if err := syscall.Fstat(z.FD, &st); err != nil {
			errs = append(errs, fmt.Errorf("zone %s: descriptor %d: %w", z.Name, z.FD, err))
			continue
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			errs = append(errs, fmt.Errorf("zone %s: descriptor %d is not a regular file (mode %#o)", z.Name, z.FD, st.Mode&syscall.S_IFMT))
			continue
		}
		fl, err := unix.FcntlInt(uintptr(z.FD), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY {
			errs = append(errs, fmt.Errorf("zone %s: descriptor %d is not open read-only", z.Name, z.FD))
			continue
		}
		syscall.CloseOnExec(z.FD)
		f := os.NewFile(uintptr(z.FD), "energy_uj of "+z.Name)
		if _, err := launch.ReadEnergyUJ(f); err != nil {
			f.Close()
			errs = append(errs, fmt.Errorf("zone %s: %w", z.Name, err))
			continue
		}
		zones = append(zones, launch.EnergyZone{Name: z.Name, File: f, MaxUJ: z.MaxUJ})
	}
	return zones, errors.Join(errs...)
}

// hostEnergyMeter sums the node's RAPL zones' energy since its first read.
type hostEnergyMeter struct {
	mu    sync.Mutex
	zones []launch.EnergyZone
	read  []bool      // the zone was read once
	first []time.Time // its first read
	last  []uint64    // its last read (µJ)
	sumUJ []uint64    // its increases since the first read (µJ)
	wraps []int       // the wraps seen
	why   []string    // its last read's error ("" none)
	warn  func(string, ...any)
	stop  chan struct{}
	done  sync.WaitGroup
}

// newHostEnergyMeter reads zones once (nil when there are none).
func newHostEnergyMeter(zones []launch.EnergyZone, warn func(string, ...any)) *hostEnergyMeter {
	if len(zones) == 0 {
		return nil
	}
	n := len(zones)
	m := &hostEnergyMeter{zones: zones, read: make([]bool, n), first: make([]time.Time, n), last: make([]uint64, n), sumUJ: make([]uint64, n),
		wraps: make([]int, n), why: make([]string, n), warn: warn, stop: make(chan struct{})}
	m.sample()
	return m
}

// sample reads every zone now and adds its increase since the last read.
func (m *hostEnergyMeter) sample() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, z := range m.zones {
		v, err := launch.ReadEnergyUJ(z.File)
		if err != nil {
			if m.why[i] == "" && m.warn != nil {
				m.warn("host energy: zone %s: %v (its series is absent until a read succeeds)", z.Name, err)
			}
			m.why[i] = err.Error()
			continue
		}
		m.why[i] = ""
		if m.read[i] {
			if v < m.last[i] {
				m.wraps[i]++
			}
			m.sumUJ[i] += launch.EnergyDeltaUJ(m.last[i], v, z.MaxUJ)
		}
		if !m.read[i] {
			m.first[i] = time.Now()
		}
		m.read[i], m.last[i] = true, v
	}
}

// run samples every `every` (at most hostEnergyMaxEvery) until close.
func (m *hostEnergyMeter) run(every time.Duration) {
	if m == nil {
		return
	}
	if every <= 0 || every > hostEnergyMaxEvery {
		every = hostEnergyMaxEvery
	}
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
}

// close stops the sampling and closes the zones' files.
func (m *hostEnergyMeter) close() {
	if m == nil {
		return
	}
	close(m.stop)
	m.done.Wait()
	for _, z := range m.zones {
		z.File.Close()
	}
}

// families samples and returns the sums: one vocab.HostEnergyJoules
// point per zone read (J since the first read), vocab.HostEnergyWraps
// (the counter's wraps handled) and vocab.HostEnergyStart (the first
// read's time, at which the sum was 0 by construction: inspect's sample
// before the collector's first reading). None from a nil meter.
func (m *hostEnergyMeter) families() []family {
	if m == nil {
		return nil
	}
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	joules := family{name: vocab.HostEnergyJoules, help: "The node's energy by RAPL zone since the supervisor's first read, joules (the node's, not the job's).", counter: true}
	wraps := family{name: vocab.HostEnergyWraps, help: "Wraps of the zone's counter past max_energy_range_uj that the sum carries.", counter: true}
	start := family{name: vocab.HostEnergyStart, help: "When the sum began (the zone's first read), seconds since the epoch: the sum was 0 then."}
	for i, z := range m.zones {
		if m.read[i] && m.why[i] == "" {
			zone := [][2]string{{"zone", z.Name}}
			joules.points = append(joules.points, point{labels: zone, value: float64(m.sumUJ[i]) / 1e6})
			wraps.points = append(wraps.points, point{labels: zone, value: float64(m.wraps[i])})
			start.points = append(start.points, point{labels: zone, value: float64(m.first[i].UnixMicro()) / 1e6})
		}
	}
	if len(joules.points) == 0 {
		return nil
	}
	return []family{joules, wraps, start}
}
