package memory

import "testing"

// TestOf: the limiter's spike, GOMEMLIMIT and the group's bound of a
// memory_limit_mib, the site's cap deciding the bound only when lower.
func TestOf(t *testing.T) {
	for _, c := range []struct {
		limit, capMiB int
		want          Policy
	}{
		{512, 2048, Policy{LimitMiB: 512, SpikeLimitMiB: 102, GoMemLimitMiB: 409, GroupBytes: 1024 << 20}},
		{512, 0, Policy{LimitMiB: 512, SpikeLimitMiB: 102, GoMemLimitMiB: 409, GroupBytes: 1024 << 20}},
		{2048, 1024, Policy{LimitMiB: 2048, SpikeLimitMiB: 409, GoMemLimitMiB: 1638, GroupBytes: 1024 << 20, GroupCapped: true}},
		{1024, 2048, Policy{LimitMiB: 1024, SpikeLimitMiB: 204, GoMemLimitMiB: 819, GroupBytes: 2048 << 20}},
	} {
		if got := Of(c.limit, c.capMiB); got != c.want {
			t.Errorf("Of(%d, %d) = %+v, want %+v", c.limit, c.capMiB, got, c.want)
		}
	}
}
