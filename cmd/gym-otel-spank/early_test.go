//go:build cgo

package main

import (
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// TestEarlyNames: the constructor's names (early.h) are the launch
// contract's and the rendering's.
func TestEarlyNames(t *testing.T) {
	want := [3]string{launch.EnvEarlyCollector, launch.EnvHandover, render.ConfigEnv}
	if earlyNames != want {
		t.Errorf("early.h names %q, the Go side %q", earlyNames, want)
	}
}
