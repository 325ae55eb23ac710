// Command dcgm-standin serves a dcgm-exporter-like Prometheus /metrics
// endpoint: per-GPU DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED and
// DCGM_FI_DEV_POWER_USAGE gauges with dcgm-exporter's labels (gpu, UUID,
// pci_bus_id, device, modelName, Hostname) in the classic text format;
// with --energy also the DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter (mJ
// since boot), and with --mig one series per MIG instance of every GPU,
// with the labels dcgm-exporter adds for a GPU instance (GPU_I_PROFILE,
// GPU_I_ID; NVIDIA/dcgm-exporter internal/pkg/rendermetrics/
// render_metrics.go, commit d5e5f51).
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/tests/standins/internal/promserve"
	"github.com/prometheus/client_golang/prometheus"
)

func main() {
	port := flag.Int("port", 9400, "TCP port to listen on")
	listen := flag.String("listen", "127.0.0.1", "address to bind")
	gpus := flag.String("gpus", "0,1,2,3", "comma-separated GPU indices")
	modelName := flag.String("model-name", "NVIDIA H100 80GB HBM3", "modelName label value")
	hostname := flag.String("hostname", "", "Hostname label value (default: os.Hostname)")
	scrapeLog := flag.String("scrape-log", "", "append the RFC3339Nano UTC time of each /metrics scrape to this file")
	idleList := flag.String("idle-gpus", "", "comma-separated GPU indices that sit idle: utilisation 0 %, 0 MiB used, 61.5 W")
	migList := flag.String("mig", "", "MIG instances of every GPU, `GI:PROFILE,...` (e.g. 1:3g.40gb,2:3g.40gb): one series per instance, as dcgm-exporter serves a MIG-partitioned GPU")
	energy := flag.Bool("energy", false, "also serve DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (counter, mJ since boot): the power integrated over wall-clock time between scrapes")
	constant := flag.Bool("constant", false, "every scrape serves the values of the first one (the figures do not depend on how often it was scraped)")
	var curveFlags []string
	flag.Func("curve", "`GPUS=BASE:AMP:PERIOD` (repeatable): the GPUs listed draw BASE + AMP sin(2 pi t / PERIOD) W, t the seconds since --epoch, and their energy counter (with --energy) is 1e9+10^6 g mJ plus the curve's exact integral since --epoch", func(v string) error {
		curveFlags = append(curveFlags, v)
		return nil
	})
	epochNs := flag.Int64("epoch", 0, "the curves' time zero, Unix `nanoseconds` (default: the stand-in's start)")
	energyList := flag.String("energy-gpus", "", "with --energy, serve the counter only for these GPU indices (default: every GPU)")
	pauseFile := flag.String("pause-file", "", "while this `file` exists, /metrics answers 503 (no sample: a gap)")
	resetFile := flag.String("reset-file", "", "once this `file` exists (checked at each scrape), the energy counters of --reset-gpus restart from 0 (a driver reload)")
	resetList := flag.String("reset-gpus", "", "the GPU indices --reset-file resets")
	flag.Parse()
	log.SetPrefix("dcgm-standin: ")
	log.SetFlags(0)

	host := *hostname
	if host == "" {
		host, _ = os.Hostname()
	}
	idx := indices("--gpus", *gpus)
	idle := map[int]bool{}
	for _, g := range indices("--idle-gpus", *idleList) {
		idle[g] = true
	}

	epoch := time.Now()
	if *epochNs != 0 {
		epoch = time.Unix(0, *epochNs)
	}
	curves := map[int]curve{}
	for _, c := range curveFlags {
		gs, spec, ok := strings.Cut(c, "=")
		var cv curve
		if n, err := fmt.Sscanf(spec, "%g:%g:%g", &cv.base, &cv.amp, &cv.period); !ok || err != nil || n != 3 || cv.period <= 0 {
			log.Fatalf("--curve: bad %q (want GPUS=BASE:AMP:PERIOD, e.g. 0,1=300:100:4)", c)
		}
		for _, g := range indices("--curve", gs) {
			curves[g] = cv
		}
	}
	counted := map[int]bool{}
	for _, g := range indices("--energy-gpus", *energyList) {
		counted[g] = true
	}
	resets := map[int]bool{}
	for _, g := range indices("--reset-gpus", *resetList) {
		resets[g] = true
	}
	var resetAt time.Time // when --reset-file was first seen

	migs := instances(*migList)
	names := []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
	if len(migs) > 0 {
		names = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname"}
	}
	util := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_UTIL", Help: "GPU utilization (in %)."}, names)
	fb := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_USED", Help: "Framebuffer memory used (in MiB)."}, names)
	power := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_POWER_USAGE", Help: "Power draw (in W)."}, names)
	joules := &constCounters{desc: prometheus.NewDesc("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", names, nil), names: names}
	reg := prometheus.NewRegistry()
	reg.MustRegister(util, fb, power)
	if *energy {
		reg.MustRegister(joules)
	}

	labelsOf := func(g int, mi *migInstance) prometheus.Labels {
		l := prometheus.Labels{
			"gpu":        strconv.Itoa(g),
			"UUID":       fmt.Sprintf("GPU-5fd4c1a0-0000-4000-8000-%012d", g),
			"pci_bus_id": fmt.Sprintf("00000000:%02X:00.0", 0x18+g),
			"device":     fmt.Sprintf("nvidia%d", g),
			"modelName":  *modelName,
			"Hostname":   host,
		}
		if mi != nil {
			l["GPU_I_PROFILE"], l["GPU_I_ID"] = mi.profile, strconv.Itoa(mi.gi)
		}
		return l
	}
	var scrapes int
	var last time.Time
	before := func() {
		if scrapes == 0 || !*constant {
			scrapes++
		}
		now := time.Now()
		dt := 0.0
		if !last.IsZero() {
			dt = now.Sub(last).Seconds()
		}
		last = now
		t := now.Sub(epoch).Seconds()
		if *resetFile != "" && resetAt.IsZero() {
			if _, err := os.Stat(*resetFile); err == nil {
				resetAt = now
			}
		}
		for _, g := range idx {
			// The GPU's energy counter at a curve (mJ): the parent's, the
			// same on every MIG instance's series.
			cv, onCurve := curves[g]
			var curveMJ float64
			if onCurve {
				curveMJ = 1e9 + float64(g)*1e6 + cv.energy(0, t)*1000
				if resets[g] && !resetAt.IsZero() {
					curveMJ = cv.energy(resetAt.Sub(epoch).Seconds(), t) * 1000
				}
			}
			// One series per GPU, or per MIG instance: an instance's
			// utilisation and memory are its own, its power (a
			// device-level field) the parent GPU's.
			set := func(mi *migInstance, k int) {
				l := labelsOf(g, mi)
				w := 120.5 + float64((scrapes*7+g*11)%500)
				if idle[g] {
					util.With(l).Set(0)
					fb.With(l).Set(0)
					w = 61.5
				} else {
					util.With(l).Set(float64((scrapes*13 + g*29 + k*17) % 101))
					fb.With(l).Set(float64(20000 + (scrapes*97+g*331+k*53)%50000))
				}
				if onCurve {
					w = cv.power(t)
				}
				power.With(l).Set(w)
				if len(counted) > 0 && !counted[g] {
					return
				}
				switch {
				case onCurve:
					joules.set(l, curveMJ)
				case dt == 0:
					joules.set(l, 1e9+float64(g)*1e6+w*dt*1000) // since boot
				default:
					joules.add(l, w*dt*1000) // W x s = J; mJ
				}
			}
			if len(migs) == 0 {
				set(nil, 0)
				continue
			}
			for k := range migs {
				set(&migs[k], k)
			}
		}
	}

	mux := http.NewServeMux()
	serve := promserve.Handler(reg, *scrapeLog, before)
	mux.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if *pauseFile != "" {
			if _, err := os.Stat(*pauseFile); err == nil {
				http.Error(w, "paused", http.StatusServiceUnavailable)
				return
			}
		}
		serve.ServeHTTP(w, r)
	}))
	addr := net.JoinHostPort(*listen, strconv.Itoa(*port))
	if err := promserve.Serve(addr, mux); err != nil {
		log.Fatal(err)
	}
}

// curve is a GPU's power curve: base + amp sin(2 pi t / period) W.
type curve struct{ base, amp, period float64 }

// power is the curve at t (s since the epoch), W.
func (c curve) power(t float64) float64 { return c.base + c.amp*math.Sin(2*math.Pi*t/c.period) }

// energy is the curve's integral from t0 to t1 (s since the epoch), J.
func (c curve) energy(t0, t1 float64) float64 {
	w := 2 * math.Pi / c.period
	return c.base*(t1-t0) + c.amp/w*(math.Cos(w*t0)-math.Cos(w*t1))
}

// constCounters serves counters whose values the stand-in sets (one may
// go down: a reset), in label order.
type constCounters struct {
	desc   *prometheus.Desc
	names  []string
	values map[string]float64
	labels map[string][]string
}

func (c *constCounters) key(l prometheus.Labels) (string, []string) {
	vs := make([]string, len(c.names))
	for i, n := range c.names {
		vs[i] = l[n]
	}
	return strings.Join(vs, "\x00"), vs
}

func (c *constCounters) set(l prometheus.Labels, v float64) {
	if c.values == nil {
		c.values, c.labels = map[string]float64{}, map[string][]string{}
	}
	k, vs := c.key(l)
	c.values[k], c.labels[k] = v, vs
}

func (c *constCounters) add(l prometheus.Labels, v float64) {
	k, _ := c.key(l)
	c.set(l, c.values[k]+v)
}

// Describe implements prometheus.Collector.
func (c *constCounters) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *constCounters) Collect(ch chan<- prometheus.Metric) {
	keys := make([]string, 0, len(c.values))
	for k := range c.values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, c.values[k], c.labels[k]...)
	}
}

// migInstance is a GPU instance: its id (GPU_I_ID) and profile
// (GPU_I_PROFILE).
type migInstance struct {
	gi      int
	profile string
}

// instances parses --mig: GI:PROFILE,...
func instances(list string) []migInstance {
	var out []migInstance
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		id, profile, ok := strings.Cut(s, ":")
		n, err := strconv.Atoi(id)
		if !ok || err != nil || n < 0 || profile == "" {
			log.Fatalf("--mig: bad instance %q (want GI:PROFILE, e.g. 1:3g.40gb)", s)
		}
		out = append(out, migInstance{n, profile})
	}
	return out
}

// indices parses a comma-separated list of GPU indices.
func indices(flagName, list string) []int {
	var idx []int
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			log.Fatalf("%s: bad GPU index %q", flagName, s)
		}
		idx = append(idx, n)
	}
	return idx
}
