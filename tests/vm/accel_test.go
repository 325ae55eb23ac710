package vm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestAccel runs tests/vm/accel.sh, the guest suite's choice of qemu's
// accelerator, against stand-ins of qemu that behave as the hosts seen:
// a KVM that boots the kernel to its panic for want of a root, a nested
// KVM whose boot stops with an emulation failure and never exits, one
// that refuses -cpu max at start, and a host without /dev/kvm.
func TestAccel(t *testing.T) {
	script := filepath.Join(testenv.Root(), "tests", "vm", "accel.sh")
	dir := t.TempDir()
	dev := filepath.Join(dir, "kvm")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(dir, "vmlinuz")
	if err := os.WriteFile(kernel, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fake := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, qemu, dev string
		want, why       string
		within          time.Duration
	}{
		{"KVM boots", fake("boots", `case "$*" in *"-accel kvm"*) ;; *) exit 9;; esac
echo '[    1.9] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)'`), dev, "kvm", "KVM boots", 10 * time.Second},
		{"nested KVM stops the boot", fake("stops", `echo 'KVM internal error. Suberror: 1'
echo 'emulation failure'
exec sleep 300`), dev, "tcg,thread=multi", "KVM internal error", 15 * time.Second},
		{"KVM refuses the CPU", fake("aborts", `echo 'qemu-system-x86_64: error: failed to set MSR 0x10a to 0x2000000' >&2
exit 1`), dev, "tcg,thread=multi", "qemu exited with 1", 10 * time.Second},
		{"no /dev/kvm", fake("unused", `exit 9`), filepath.Join(dir, "none"), "tcg,thread=multi", "no writable", 10 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command("bash", script, kernel)
			cmd.Env = append(os.Environ(), "GYM_OTEL_VM_QEMU="+c.qemu, "GYM_OTEL_VM_KVM_DEV="+c.dev, "GYM_OTEL_VM_KVM_PROBE_SECONDS=3")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			start := time.Now()
			out, err := cmd.Output()
			took := time.Since(start)
			if err != nil {
				t.Fatalf("accel.sh: %v: %s", err, stderr.String())
			}
			if got := strings.TrimSpace(string(out)); got != c.want {
				t.Errorf("accel.sh chose %q, want %q (%s)", got, c.want, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.why) {
				t.Errorf("accel.sh said %q, want it to say %q", stderr.String(), c.why)
			}
			if took > c.within {
				t.Errorf("accel.sh took %v (the probe's bound is 3 s)", took)
			}
			t.Logf("%v: %s", took.Round(time.Millisecond), strings.TrimSpace(stderr.String()))
		})
	}
}
