//go:build cgo

package main

// #include "early.h"
import "C"

import (
	"fmt"
	"os"
	"syscall"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/supervise"
)

// earlyNames are the constructor's names of the launch contract (early.h),
// for the test that holds them equal to the Go side's.
var earlyNames = [3]string{C.GOS_EARLY_COLLECTOR_ENV, C.GOS_EARLY_HANDOVER_ENV, C.GOS_EARLY_CONFIG_ENV}

// takeEarlyCollector returns the collector early.c's constructor exec'd
// at this process's start (launch.EnvEarlyCollector), watched from here
// on, or nil: none was asked, or the exec could not be tried (the error
// says why; the supervisor then starts its collector itself). Call it
// once, before anything waits for any child.
func takeEarlyCollector() (*supervise.EarlyCollector, error) {
	// The constructor exec'd this value: the environment is the one it
	// read, unchanged until here.
	bin := os.Getenv(launch.EnvEarlyCollector)
	os.Unsetenv(launch.EnvEarlyCollector)
	if C.gos_early_pid < 0 {
		if C.gos_early_errno != 0 {
			return nil, fmt.Errorf("the collector's early exec: %w", syscall.Errno(C.gos_early_errno))
		}
		return nil, nil
	}
	pid, fd := int(C.gos_early_pid), int(C.gos_early_fd)
	C.gos_early_pid, C.gos_early_fd = -1, -1
	return supervise.WatchEarlyCollector(bin, pid, os.NewFile(uintptr(fd), "handover"))
}
