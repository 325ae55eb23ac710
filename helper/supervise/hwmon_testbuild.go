//go:build gymotel_hwmon_test

package supervise

// The tests' build of the supervisor (TestHwmonScraped: go build -tags
// gymotel_hwmon_test -ldflags "-X .../helper/supervise.testHwmonRoot=
// <tree>"): it reads the hwmon power sensors of a tree the test writes
// instead of the kernel's hwmon class. The path is compiled in: nothing
// at run time (no argument, site file or environment) sets it, and a
// build without the tag (every release) has neither this file nor the
// variable.

// testHwmonRoot is the tree, set at link time ("": the kernel's).
var testHwmonRoot string

func init() {
	if testHwmonRoot != "" {
		hwmonRoot = testHwmonRoot
	}
}
