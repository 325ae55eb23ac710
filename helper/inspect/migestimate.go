package inspect

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// MIG: dcgm-exporter serves a MIG instance's device-level fields (power,
// energy) as its parent GPU's, repeated on the series of every instance of
// that GPU. A measured figure of the job's instances would be the whole
// GPU's, other tenants' work included: it stays refused. Beside it the
// report gives an estimate, after CEEMS (ceems-dev/ceems
// website/docs/advanced/power-consumption.md, commit 139d688: "the power
// consumed by entire GPU is divided amongst the different MIG instances in
// the ratio of their SMs"): the parent GPU's energy, counted once however
// many of its instances the files hold, times the job's instances' share
// of its compute, their compute slices (the "<N>g" of GPU_I_PROFILE) over
// the GPU's (7; 4 on an A30). CEEMS further weights each instance by its
// SM activity and occupancy against the other active instances; those are
// other tenants' series, which the collector does not keep, so this
// estimate is the static share: it assumes the instances busy alike.

// MethodMIGShare names the estimate's method (Estimate.Method starts
// with it).
const MethodMIGShare = "MIG share of the parent GPU's compute (CEEMS' SM ratio, static)"

// Estimate is an estimated figure, given beside a refused one.
type Estimate struct {
	// Joules is the estimate (J); Method how it was made (MethodMIGShare
	// and the shares: "gn1 GPU-...: 3/7 (GI 2 3g.40gb)").
	Joules Value  `json:"joules"`
	Method string `json:"method"`
	// Verdict is that of the parent GPUs' measured energy over the same
	// window (the share's own error is not known).
	Verdict Verdict `json:"verdict"`
}

var reSlices = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([1-8])g\.`) })

// gpuSlices is the compute slices of a MIG-capable GPU of model name
// model: 4 on an A30, else 7 (A100, H100, H200, B200).
func gpuSlices(model string) int {
	if strings.Contains(model, "A30") {
		return 4
	}
	return 7
}

// migEstimate estimates the energy of gpus over [t0, t1] where the only
// GPUs that are not the job's alone are MIG instances that are its own
// exactly (nil otherwise): per parent GPU its measured energy once, times
// the job's instances' share; a whole GPU of the job's counts whole.
func migEstimate(node string, gpus []*gpuSeries, t0, t1 int64) *Estimate {
	type parent struct {
		rep    *gpuSeries
		slices int
		total  int
		names  []string
	}
	parents := map[string]*parent{}
	var order []string
	for _, g := range gpus {
		if g.why != "" && !g.jobInstance {
			return nil // shared, unnamed, another tenant's: no estimate
		}
		p := parents[g.parent]
		if p == nil {
			p = &parent{rep: g, total: 1}
			parents[g.parent] = p
			order = append(order, g.parent)
		}
		if !g.jobInstance {
			p.slices, p.total = 1, 1 // a whole GPU of the job's
			continue
		}
		m := reSlices().FindStringSubmatch(g.profile)
		if m == nil {
			return nil // no GPU_I_PROFILE: its share is not known
		}
		n, _ := strconv.Atoi(m[1])
		p.total = gpuSlices(g.model)
		p.slices += n
		p.names = append(p.names, fmt.Sprintf("GI %s %s", g.dev.instance, g.profile))
	}
	if len(order) == 0 {
		return nil
	}
	sort.Strings(order)
	est := &Estimate{Joules: 0}
	var shares []string
	for _, k := range order {
		p := parents[k]
		rep := *p.rep
		rep.why, rep.id = "", k
		f := gpusOver(node, []*gpuSeries{&rep}, t0, t1)
		for _, w := range f.Verdict.Why {
			est.Verdict.add(w)
		}
		share := float64(p.slices) / float64(p.total)
		if p.slices > p.total {
			share = 1
		}
		if !f.Joules.Known() {
			est.Joules = Value(math.NaN())
		} else if est.Joules.Known() {
			est.Joules += Value(float64(f.Joules) * share)
		}
		if len(p.names) > 0 {
			shares = append(shares, fmt.Sprintf("%s: %d/%d (%s)", k, p.slices, p.total, strings.Join(p.names, ", ")))
		}
	}
	est.Method = MethodMIGShare + ": " + strings.Join(shares, "; ")
	est.Verdict.done()
	return est
}
