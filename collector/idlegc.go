// The garbage collector's target after the start: low while the collector
// allocates little, Go's default under load (not generated).

package main

import (
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Garbage collector targets (GOGC) after the start, in percent of the live
// heap: idleGCPercent while the allocation rate is low, busyGCPercent
// (Go's default) above it.
//
// An idle job's collector has a live heap of about 5-6 MiB and allocates
// well under 1 MiB/s (its own metrics, the cgroup scrape, health checks):
// at Go's default its heap grows to twice the live heap before each
// collection, about 6 MiB of anonymous memory that holds only garbage. At
// 25 % that headroom is about 1.5 MiB, at one collection every few seconds
// of a few ms of CPU. Under load (hundreds of MiB/s allocated) a low target
// costs 20-60 % more CPU (docs/performance.md, P4M), so the default applies
// there.
const (
	idleGCPercent = 25
	busyGCPercent = 100
)

// Allocation rates, in bytes per second, at which the tuner switches: to
// busyGCPercent above gcBusyRate, back to idleGCPercent below gcIdleRate
// (the gap keeps a rate near one threshold from switching every tick).
const (
	gcBusyRate = 8 << 20
	gcIdleRate = 2 << 20
)

// gcTuneEvery is how often the tuner reads the allocation rate.
const gcTuneEvery = time.Second

// gcPercentFor is the target for an allocation rate of rate bytes per
// second, given the current target cur (idleGCPercent or busyGCPercent).
func gcPercentFor(cur int, rate float64) int {
	switch {
	case rate > gcBusyRate:
		return busyGCPercent
	case rate < gcIdleRate:
		return idleGCPercent
	}
	return cur
}

// tuneGC sets the garbage collector's target from the allocation rate
// (runtime/metrics' /gc/heap/allocs:bytes) every gcTuneEvery, for the
// collector's life; it starts at cur. Only a change is applied
// (debug.SetGCPercent takes no stop of the world).
func tuneGC(cur int) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return // not this runtime's metric: the target stays
	}
	last, at := s[0].Value.Uint64(), time.Now()
	for range time.Tick(gcTuneEvery) {
		metrics.Read(s)
		now := time.Now()
		v := s[0].Value.Uint64()
		rate := float64(v-last) / now.Sub(at).Seconds()
		last, at = v, now
		if p := gcPercentFor(cur, rate); p != cur {
			debug.SetGCPercent(p)
			cur = p
		}
	}
}
