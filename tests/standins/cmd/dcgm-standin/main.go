// Command dcgm-standin serves a dcgm-exporter-like Prometheus /metrics
// endpoint: per-GPU DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED and
// DCGM_FI_DEV_POWER_USAGE gauges with dcgm-exporter's labels (gpu, UUID,
// pci_bus_id, device, modelName, Hostname) in the classic text format.
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

	names := []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
	util := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_GPU_UTIL", Help: "GPU utilization (in %)."}, names)
	fb := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_FB_USED", Help: "Framebuffer memory used (in MiB)."}, names)
	power := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "DCGM_FI_DEV_POWER_USAGE", Help: "Power draw (in W)."}, names)
	reg := prometheus.NewRegistry()
	reg.MustRegister(util, fb, power)

	labelsOf := func(g int) prometheus.Labels {
		return prometheus.Labels{
			"gpu":        strconv.Itoa(g),
			"UUID":       fmt.Sprintf("GPU-5fd4c1a0-0000-4000-8000-%012d", g),
			"pci_bus_id": fmt.Sprintf("00000000:%02X:00.0", 0x18+g),
			"device":     fmt.Sprintf("nvidia%d", g),
			"modelName":  *modelName,
			"Hostname":   host,
		}
	}
	var scrapes int
	before := func() {
		if scrapes == 0 || !*constant {
			scrapes++
		}
		for _, g := range idx {
			l := labelsOf(g)
			if idle[g] {
				util.With(l).Set(0)
				fb.With(l).Set(0)
				power.With(l).Set(61.5)
				continue
			}
			util.With(l).Set(float64((scrapes*13 + g*29) % 101))
			fb.With(l).Set(float64(20000 + (scrapes*97+g*331)%50000))
			power.With(l).Set(120.5 + float64((scrapes*7+g*11)%500))
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promserve.Handler(reg, *scrapeLog, before))
	addr := net.JoinHostPort(*listen, strconv.Itoa(*port))
	if err := promserve.Serve(addr, mux); err != nil {
		log.Fatal(err)
	}
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
