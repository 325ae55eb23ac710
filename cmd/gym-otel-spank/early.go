//go:build cgo

package main

// #include <stdlib.h>
// #include "early.h"
import "C"

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

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
	os.Unsetenv(launch.EnvEarlyCollector)
	if C.gos_early_pid < 0 {
		if C.gos_early_errno != 0 {
			return nil, fmt.Errorf("the collector's early exec: %w", syscall.Errno(C.gos_early_errno))
		}
		return nil, nil
	}
	bin := C.GoString(C.gos_early_binary)
	C.free(unsafe.Pointer(C.gos_early_binary))
	pid, fd := int(C.gos_early_pid), int(C.gos_early_fd)
	C.gos_early_binary, C.gos_early_pid, C.gos_early_fd = nil, -1, -1
	return supervise.WatchEarlyCollector(bin, pid, os.NewFile(uintptr(fd), "handover"))
}
