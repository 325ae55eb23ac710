package inspect

// vLLM's inter-token latency histogram, under its current name and the
// name it replaces (vLLM's docs/design/metrics.md: time_per_output_token
// was renamed inter_token_latency, as gpu_cache_usage_perc was renamed
// kv_cache_usage_perc; a deprecated name is hidden one release later and
// removed the release after). A server that exposes both (during the
// deprecation window) is read under the current name only.
const (
	mITL  = "vllm_inter_token_latency_seconds"
	mTPOT = "vllm_time_per_output_token_seconds"
)

func init() {
	tracked[mITL] = true
	tracked[mTPOT] = true
}

// interTokenLatency picks the histograms of one server: the current name's
// when it has any, else the old name's.
func interTokenLatency(itl, tpot []*histogram) []*histogram {
	if len(itl) > 0 {
		return itl
	}
	return tpot
}
