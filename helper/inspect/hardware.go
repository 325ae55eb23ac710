package inspect

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

type gpuKey struct{ node, gpu, instance string }

func (a *aggregator) gpus() []GPU {
	var keys []gpuKey
	by := map[gpuKey]map[string]*series{}
	for _, s := range a.order {
		if !strings.HasPrefix(s.key.metric, "DCGM_FI_") || s.g == nil {
			continue
		}
		k := gpuKey{s.key.node, s.labels["gpu"], s.labels[aGPUInstance]}
		if by[k] == nil {
			by[k] = map[string]*series{}
			keys = append(keys, k)
		}
		by[k][s.key.metric] = s
	}
	out := []GPU{}
	nan := Value(math.NaN())
	for _, k := range keys {
		m := by[k]
		g := GPU{Node: k.node, GPU: k.gpu, Instance: k.instance, UtilMean: nan, UtilMax: nan, MemoryUsedMax: nan, MemoryTotal: nan, PowerMean: nan, PowerMax: nan}
		for _, s := range m {
			g.Model, g.Profile, g.Attribution = s.labels["modelName"], s.labels[aGPUProfile], s.labels[aAttribution]
			break
		}
		if s := m[mGPUUtil]; s != nil {
			g.Model = s.labels["modelName"]
			g.UtilMean, g.UtilMax = Value(s.g.mean()), Value(s.g.max)
			g.Idle = s.g.max == 0
			g.UtilOverTime = points(s.g.tl.pts)
		}
		if s := m[mFBUsed]; s != nil {
			g.MemoryUsedMax = Value(s.g.max)
			if f := m[mFBFree]; f != nil {
				g.MemoryTotal = Value(s.g.last + f.g.last)
			}
		}
		if s := m[mPower]; s != nil {
			g.PowerMean, g.PowerMax = Value(s.g.mean()), Value(s.g.max)
			g.PowerOverTime = points(s.g.tl.pts)
		}
		out = append(out, g)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return false
		}
		a, _ := strconv.Atoi(out[i].GPU)
		b, _ := strconv.Atoi(out[j].GPU)
		if a != b {
			return a < b
		}
		x, _ := strconv.Atoi(out[i].Instance)
		y, _ := strconv.Atoi(out[j].Instance)
		return x < y
	})
	return out
}

func (a *aggregator) hosts(nodes []string) []Host {
	type acc struct {
		busy, all float64
		cpus      map[string]bool
		h         Host
		seen      bool
	}
	by := map[string]*acc{}
	get := func(n string) *acc {
		if by[n] == nil {
			nan := Value(math.NaN())
			by[n] = &acc{cpus: map[string]bool{}, h: Host{Node: n, CPUBusy: nan, MemoryTotal: nan, MemoryUsedMax: nan, Load1Max: nan}}
		}
		by[n].seen = true
		return by[n]
	}
	minAvail := map[string]float64{}
	for _, s := range a.order {
		switch s.key.metric {
		case mCPUSeconds:
			if s.c == nil {
				continue
			}
			// A CPU counts from its first sample; its busy share needs
			// two (a short job may have one scrape).
			x := get(s.key.node)
			x.cpus[s.labels["cpu"]] = true
			if s.c.n < 2 {
				continue
			}
			inc := s.c.total() - s.c.firstAdj
			x.all += inc
			if s.labels["mode"] != "idle" {
				x.busy += inc
			}
		case mMemTotal:
			get(s.key.node).h.MemoryTotal = Value(s.g.max)
		case mMemAvailable:
			get(s.key.node)
			minAvail[s.key.node] = s.g.min
		case mLoad1:
			x := get(s.key.node)
			x.h.Load1Max = Value(s.g.max)
			x.h.Load1OverTime = points(s.g.tl.pts)
		}
	}
	out := []Host{}
	for _, n := range nodes {
		x := by[n]
		if x == nil {
			continue
		}
		x.h.CPUs = len(x.cpus)
		if x.all > 0 {
			x.h.CPUBusy = Value(x.busy / x.all)
		}
		if av, ok := minAvail[n]; ok && x.h.MemoryTotal.Known() {
			x.h.MemoryUsedMax = x.h.MemoryTotal - Value(av)
		}
		out = append(out, x.h)
	}
	return out
}
