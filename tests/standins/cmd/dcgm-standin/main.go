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
	"net"
	"net/http"
	"os"
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

	migs := instances(*migList)
	names := []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
	if len(migs) > 0 {
		names = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname"}
	}
	util := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_UTIL", Help: "GPU utilization (in %)."}, names)
	fb := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_USED", Help: "Framebuffer memory used (in MiB)."}, names)
	power := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_POWER_USAGE", Help: "Power draw (in W)."}, names)
	joules := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Help: "Total energy consumption since boot (in mJ)."}, names)
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
		for _, g := range idx {
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
				power.With(l).Set(w)
				c := joules.With(l)
				if dt == 0 {
					c.Add(1e9 + float64(g)*1e6) // since boot
				}
				c.Add(w * dt * 1000) // W x s = J; mJ
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
	mux.Handle("/metrics", promserve.Handler(reg, *scrapeLog, before))
	addr := net.JoinHostPort(*listen, strconv.Itoa(*port))
	if err := promserve.Serve(addr, mux); err != nil {
		log.Fatal(err)
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
