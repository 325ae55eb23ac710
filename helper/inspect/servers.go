package inspect

import (
	"math"
	"strings"
)

type serverKey struct{ node, producer, model string }

func (a *aggregator) modelServers() []ModelServer {
	keyOf := func(s *series) serverKey {
		return serverKey{s.key.node, s.key.producer, s.labels["model_name"]}
	}
	var keys []serverKey
	bySrv := map[serverKey][]*series{}
	for _, s := range a.order {
		if !strings.HasPrefix(s.key.metric, "vllm_") || strings.HasPrefix(s.key.metric, routerPrefix) {
			continue
		}
		k := keyOf(s)
		if _, ok := bySrv[k]; !ok {
			keys = append(keys, k)
		}
		bySrv[k] = append(bySrv[k], s)
	}
	var out []ModelServer
	var allE2E, allTTFT [][]Bucket
	var allE2ES, allTTFTS histSummary
	nan := Value(math.NaN())
	total := ModelServer{Node: "(all)", Producer: "", Model: "", RateWindowSeconds: nan}
	sums := map[string]Value{"req": nan, "prompt": nan, "gen": nan}
	rates := map[string]Value{"prompt": nan, "gen": nan}
	for _, k := range keys {
		m := ModelServer{Node: k.node, Producer: k.producer, Model: k.model}
		m.Requests, m.PromptTokens, m.GenerationTokens = nan, nan, nan
		m.PromptTokensPerSecond, m.GenerationTokensPerSecond, m.RateWindowSeconds = nan, nan, nan
		m.RunningMean, m.RunningMax, m.WaitingMean, m.WaitingMax, m.KVCacheMean, m.KVCacheMax = nan, nan, nan, nan, nan, nan
		m.E2ELatency, m.TTFT = unknownQ(), unknownQ()
		var e2e, ttft, itl, tpot []*histogram
		for _, s := range bySrv[k] {
			switch s.key.metric {
			case mPromptTokens:
				m.PromptTokens = addV(m.PromptTokens, s.c.total())
				m.PromptTokensPerSecond = addV(m.PromptTokensPerSecond, s.c.rate())
				m.RateWindowSeconds = maxV(m.RateWindowSeconds, s.c.window())
				m.CounterResets = max(m.CounterResets, s.c.resets)
			case mGenTokens:
				m.GenerationTokens = addV(m.GenerationTokens, s.c.total())
				m.GenerationTokensPerSecond = addV(m.GenerationTokensPerSecond, s.c.rate())
				m.RateWindowSeconds = maxV(m.RateWindowSeconds, s.c.window())
				m.CounterResets = max(m.CounterResets, s.c.resets)
				m.GenerationPerSec = append(m.GenerationPerSec, points(s.c.rates())...)
			case mRequestSuccess:
				m.Requests = addV(m.Requests, s.c.total())
			case mRunning:
				m.RunningMean, m.RunningMax = Value(s.g.mean()), Value(s.g.max)
				m.RunningOverTime = points(s.g.tl.pts)
			case mWaiting:
				m.WaitingMean, m.WaitingMax = Value(s.g.mean()), Value(s.g.max)
				m.WaitingOverTime = points(s.g.tl.pts)
			case mKVCache, mKVCacheV0:
				m.KVCacheMean, m.KVCacheMax = Value(s.g.mean()), Value(s.g.max)
				m.KVCacheOverTime = points(s.g.tl.pts)
			case mE2E:
				e2e = append(e2e, s.h)
			case mTTFT:
				ttft = append(ttft, s.h)
			case mITL:
				itl = append(itl, s.h)
			case mTPOT:
				tpot = append(tpot, s.h)
			}
		}
		m.InterToken, _ = histFigures(interTokenLatency(itl, tpot))
		m.E2ELatency, m.E2EBuckets = histFigures(e2e)
		m.TTFT, m.TTFTBuckets = histFigures(ttft)
		if !m.Requests.Known() && len(e2e) > 0 {
			m.Requests = m.E2ELatency.Count
		}
		for _, h := range e2e {
			if h != nil {
				allE2E = append(allE2E, h.cumulative())
				allE2ES.add(h)
			}
		}
		for _, h := range ttft {
			if h != nil {
				allTTFT = append(allTTFT, h.cumulative())
				allTTFTS.add(h)
			}
		}
		total.RateWindowSeconds = maxV(total.RateWindowSeconds, float64(m.RateWindowSeconds))
		for name, v := range map[string]Value{"req": m.Requests, "prompt": m.PromptTokens, "gen": m.GenerationTokens} {
			sums[name] = addV(sums[name], float64(v))
		}
		for name, v := range map[string]Value{"prompt": m.PromptTokensPerSecond, "gen": m.GenerationTokensPerSecond} {
			rates[name] = addV(rates[name], float64(v))
		}
		total.CounterResets = max(total.CounterResets, m.CounterResets)
		out = append(out, m)
	}
	if len(out) < 1 {
		return []ModelServer{}
	}
	total.Requests, total.PromptTokens, total.GenerationTokens = sums["req"], sums["prompt"], sums["gen"]
	total.PromptTokensPerSecond, total.GenerationTokensPerSecond = rates["prompt"], rates["gen"]
	total.RunningMean, total.RunningMax, total.WaitingMean, total.WaitingMax, total.KVCacheMean, total.KVCacheMax = nan, nan, nan, nan, nan, nan
	total.E2ELatency, total.TTFT, total.InterToken = unknownQ(), unknownQ(), unknownQ()
	if len(allE2E) > 0 {
		total.E2ELatency = histQuantiles(mergeBuckets(allE2E...), allE2ES)
	}
	if len(allTTFT) > 0 {
		total.TTFT = histQuantiles(mergeBuckets(allTTFT...), allTTFTS)
	}
	if len(out) > 1 {
		out = append(out, total)
	}
	return out
}
