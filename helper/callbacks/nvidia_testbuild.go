//go:build gymotel_nvidia_test

package callbacks

import "strings"

// The tests' build of the plugin's core (tests/plugin's TestEnergyPerStep:
// go build -tags gymotel_nvidia_test -ldflags "-X
// .../helper/callbacks.testNvidiaRoot=<tree>/%n"): the job's supervisor
// names the job's GPUs by device from a tree the test writes instead of
// the NVIDIA driver's /proc/driver/nvidia, which the test machine has
// not; "%n" in the path is the node's name, so that the test cluster's
// nodes, which share one host, each have a driver of their own. The path
// is compiled in: nothing at run time (no argument, site file or
// environment of the job's) sets it, and a build without the tag (every
// release) has neither this file nor the variable.

// testNvidiaRoot is the tree, set at link time ("": the driver's).
var testNvidiaRoot string

func init() {
	if testNvidiaRoot != "" {
		nvidiaRoot = func(node string) string { return strings.ReplaceAll(testNvidiaRoot, "%n", node) }
	}
}
