// Package memory is the memory policy of a job's collector on a node:
// every memory bound the plugin derives from otel.memory_limit_mib, in
// one place, as helper/timing holds the timing policy. The collector's
// configuration (helper/render: the memory_limiter), its environment
// (helper/supervise: GOMEMLIMIT) and the prolog's bound of the job's
// group (helper/callbacks, helper/cgroup) take their figures from Of. It
// imports nothing.
package memory

// GroupFactor sets the hard bound of the job's group on the node at the
// prolog: GroupFactor x memory_limit_mib (the collector's own soft limit),
// never above the site's cap (plugstack cgroup_memory_max_mib).
const GroupFactor = 2

// Policy is every memory bound of one job's collector on one node.
type Policy struct {
	// LimitMiB is otel.memory_limit_mib: the memory_limiter refuses data
	// above it.
	LimitMiB int
	// SpikeLimitMiB is the memory_limiter's spike_limit_mib, a fifth of
	// LimitMiB: it forces a collection above LimitMiB - SpikeLimitMiB.
	SpikeLimitMiB int
	// GoMemLimitMiB is the Go runtime's soft limit (GOMEMLIMIT in the
	// collector's environment), four fifths of LimitMiB, so that the
	// runtime collects before the limiter refuses.
	GoMemLimitMiB int
	// GroupBytes is the hard bound of the job's group on the node at the
	// prolog, bytes: GroupFactor x LimitMiB, at most the site's cap (the
	// job's first step lowers it to the job's memory, spank/cgroup.c).
	GroupBytes int64
	// GroupCapped says the site's cap decided GroupBytes.
	GroupCapped bool
}

// Of is the policy of memory_limit_mib limitMiB (already validated) under
// the site's cap capMiB (plugstack cgroup_memory_max_mib, MiB; 0: none).
func Of(limitMiB, capMiB int) Policy {
	p := Policy{LimitMiB: limitMiB, SpikeLimitMiB: limitMiB / 5, GoMemLimitMiB: limitMiB * 4 / 5,
		GroupBytes: int64(limitMiB) * GroupFactor << 20}
	if c := int64(capMiB) << 20; capMiB > 0 && p.GroupBytes > c {
		p.GroupBytes, p.GroupCapped = c, true
	}
	return p
}
