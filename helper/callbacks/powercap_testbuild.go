//go:build gymotel_powercap_test

package callbacks

// The tests' build of the plugin's core (tests/plugin's TestHostPowerRAPL:
// go build -tags gymotel_powercap_test -ldflags "-X
// .../helper/callbacks.testPowercapRoot=<tree>"): the prolog opens the
// RAPL zones of a tree the test writes instead of the kernel's powercap
// class, which the test machine has not. The path is compiled in: nothing
// at run time (no argument, site file or environment) sets it, and a
// build without the tag (every release) has neither this file nor the
// variable.

// testPowercapRoot is the tree, set at link time ("": the kernel's).
var testPowercapRoot string

func init() {
	if testPowercapRoot != "" {
		powercapRoot = testPowercapRoot
	}
}
