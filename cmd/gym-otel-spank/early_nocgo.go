//go:build !cgo

package main

import "github.com/gym-otel-spank/gym-otel-spank/helper/supervise"

// takeEarlyCollector: a build without cgo has no early exec (early.c);
// the supervisor starts its collector itself.
func takeEarlyCollector() (*supervise.EarlyCollector, error) { return nil, nil }
