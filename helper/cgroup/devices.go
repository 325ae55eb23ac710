package cgroup

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/opencontainers/cgroups"
	// The devices package installs cgroups.DevicesSetV2 (runc's device
	// program generator and loader); without the import it is nil.
	_ "github.com/opencontainers/cgroups/devices"
	devconfig "github.com/opencontainers/cgroups/devices/config"
	"golang.org/x/sys/unix"
)

// DeviceRules parses v1 devices.allow rules ("c 1:3 rwm", "c 136:* rwm",
// "b 8:0 r") into the allow rules of a device program. Types: c, b (a is
// refused: "all devices" is never what a job's group allows); major and
// minor: a number or *; access: a non-empty subset of rwm. The error names
// the rule.
func DeviceRules(rules []string) ([]*devconfig.Rule, error) {
	out := make([]*devconfig.Rule, 0, len(rules))
	for _, s := range rules {
		f := strings.Fields(s)
		if len(f) != 3 {
			return nil, fmt.Errorf("device rule %q: want \"<c|b> <major>:<minor> <rwm>\"", s)
		}
		var r devconfig.Rule
		switch f[0] {
		case "c":
			r.Type = devconfig.CharDevice
		case "b":
			r.Type = devconfig.BlockDevice
		default:
			return nil, fmt.Errorf("device rule %q: type %q is not c or b", s, f[0])
		}
		maj, min, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("device rule %q: %q is not <major>:<minor>", s, f[1])
		}
		var err error
		if r.Major, err = devNumber(maj); err != nil {
			return nil, fmt.Errorf("device rule %q: major: %w", s, err)
		}
		if r.Minor, err = devNumber(min); err != nil {
			return nil, fmt.Errorf("device rule %q: minor: %w", s, err)
		}
		r.Permissions = devconfig.Permissions(f[2])
		if f[2] == "" || strings.Trim(f[2], "rwm") != "" || len(f[2]) > 3 {
			return nil, fmt.Errorf("device rule %q: access %q is not a subset of rwm", s, f[2])
		}
		r.Allow = true
		out = append(out, &r)
	}
	return out, nil
}

// devNumber parses a device major or minor: a number below 2^20 (the
// kernel's minor width; majors are 12 bits) or * (any).
func devNumber(s string) (int64, error) {
	if s == "*" {
		return devconfig.Wildcard, nil
	}
	n, err := strconv.ParseUint(s, 10, 20)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number below 1048576 or *", s)
	}
	return int64(n), nil
}

// attachDeviceProgram attaches to the v2 cgroup directory path a
// BPF_CGROUP_DEVICE program that allows the devices of rules (v1
// devices.allow syntax) and denies every other device. It is runc's
// program and loader (github.com/opencontainers/cgroups/devices): the
// program is generated from the rules and attached with BPF_F_ALLOW_MULTI,
// replacing (BPF_F_REPLACE) or detaching any program attached to path
// itself before. With BPF_F_ALLOW_MULTI the kernel runs the group's
// program and every program an ancestor attached with BPF_F_ALLOW_MULTI
// (systemd's DeviceAllow=, runc), and a device is allowed only when all
// of them allow it: the group never widens what is above it. An ancestor
// whose program was attached without any flag (no descendant may attach)
// makes the attach fail with EPERM; one attached with
// BPF_F_ALLOW_OVERRIDE (Slurm's cgroup/v2 on its job and step
// directories, never on the directories above them) is replaced by the
// group's program for the group. The program is held by the cgroup, not
// by this process (BPF_PROG_ATTACH, not a bpf link): it stays when the
// prolog exits, and the kernel detaches and frees it when the directory
// is removed.
func attachDeviceProgram(path string, rules []string) error {
	if skipDevicePrograms {
		return nil
	}
	rs, err := DeviceRules(rules)
	if err != nil {
		return err
	}
	if cgroups.DevicesSetV2 == nil {
		return fmt.Errorf("cgroup %s: no device program loader", path)
	}
	// The loader raises RLIMIT_MEMLOCK to unlimited for kernels before
	// 5.11 (which charge BPF programs to it); the supervisor forked after
	// this must not inherit that, so the limit is put back.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err == nil {
		defer func() { _ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim) }()
	}
	if err := cgroups.DevicesSetV2(path, &cgroups.Resources{Devices: rs}); err != nil {
		return fmt.Errorf("cgroup %s: the device program (BPF_CGROUP_DEVICE): %w", path, err)
	}
	return nil
}

// skipDevicePrograms leaves the program out (BenchmarkDeviceGroup's
// comparison only).
var skipDevicePrograms bool
