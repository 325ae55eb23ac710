// Package testenv finds the real parts the tests run: the collector binary
// built by `make collector`, the stand-ins, the repository root.
//
// A missing part skips the test, except when GYM_OTEL_REQUIRE_REAL=1 (set by
// `make test` and CI), where it fails: a run that was meant to use real parts
// never passes without them.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Root returns the repository root (the directory holding go.mod).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Required reports whether missing real parts fail the tests.
func Required() bool { return os.Getenv("GYM_OTEL_REQUIRE_REAL") == "1" }

// Missing skips t (or fails it when Required) because what is absent.
func Missing(t testing.TB, what string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is missing (GYM_OTEL_REQUIRE_REAL=1)", what)
	}
	t.Skipf("%s is missing; run make collector standins, or set GYM_OTEL_REQUIRE_REAL=1 to fail", what)
}

// Collector returns the path of the collector binary: $GYM_OTEL_COLLECTOR,
// else build/otelcol-gym of the repository.
func Collector(t testing.TB) string {
	t.Helper()
	p := os.Getenv("GYM_OTEL_COLLECTOR")
	if p == "" {
		p = filepath.Join(Root(), "build", "otelcol-gym")
	}
	if _, err := os.Stat(p); err != nil {
		Missing(t, "the collector binary "+p)
	}
	return p
}

// Standin returns the path of a stand-in built into build/standins.
func Standin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Root(), "build", "standins", name)
	if _, err := os.Stat(p); err != nil {
		Missing(t, "the stand-in "+p)
	}
	return p
}

// Binary returns the path of a program on PATH or at one of the given paths.
func Binary(t testing.TB, name string, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, name)
	}
	return p
}

// EnvOf parses the output of env(1) (KEY=VALUE lines) into a map.
func EnvOf(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// ReadTime reads an RFC 3339 timestamp with nanoseconds (as written by
// `date -u +%Y-%m-%dT%H:%M:%S.%NZ`) from file p; a missing file or a bad
// timestamp fails the test.
func ReadTime(t testing.TB, p string) time.Time {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return tm
}

// NvidiaGPU writes root/gpus/<bus>/information as the NVIDIA driver's
// procfs does (kernel-open/nvidia/nv-procfs.c, nv_procfs_read_gpu_info):
// a GPU of PCI bus id bus ("0000:3b:00.0"), device minor minor and UUID
// uuid, for a test's stand-in of /proc/driver/nvidia.
func NvidiaGPU(t testing.TB, root, bus string, minor int, uuid string) {
	t.Helper()
	dir := filepath.Join(root, "gpus", bus)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	text := "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 183\nGPU UUID: \t " + uuid + "\nVideo BIOS: \t 96.00.74.00.0d\n" +
		"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t " + bus + "\n" +
		"Device Minor: \t " + strconv.Itoa(minor) + "\nGPU Excluded:\t No\n"
	if err := os.WriteFile(filepath.Join(dir, "information"), []byte(text), 0o444); err != nil {
		t.Fatal(err)
	}
}
