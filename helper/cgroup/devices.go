package cgroup

// The device program of a v2 group.
//
// Decision: the program is generated here with github.com/cilium/ebpf/asm
// (the eBPF instruction encoder runc's own generator is written with) and
// loaded and attached with bpf(2) directly, not through runc's
// github.com/opencontainers/cgroups/devices. That package does the same
// (its program for a list like DeviceAllow is about 50 instructions of the
// same shape), but exports it only as a hook of its cgroup managers, and
// cannot be imported without its systemd manager, its fs and fs2
// managers, a D-Bus client (godbus, go-systemd) and moby's mount helpers,
// none of which the core calls. Measured on the core library that slurmd
// and slurmstepd load (build/gym_otel_core.so, 10,891,600 bytes before):
// with runc's package 11,983,224 (+1,091,624), with the encoder and this
// file 11,475,848 (+584,248). The tests check the program on the node's
// real unified hierarchy (devices_test.go).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// DeviceRule is one allowed device (or set of devices): a v1
// devices.allow rule.
type DeviceRule struct {
	// Type is 'c' (character) or 'b' (block).
	Type byte
	// Major and Minor are the device numbers; -1 is any (*).
	Major, Minor int64
	// Access is a non-empty subset of "rwm" (read, write, mknod).
	Access string
}

// String is the rule in devices.allow syntax ("c 195:0 rw").
func (r DeviceRule) String() string {
	n := func(v int64) string {
		if v < 0 {
			return "*"
		}
		return strconv.FormatInt(v, 10)
	}
	return fmt.Sprintf("%c %s:%s %s", r.Type, n(r.Major), n(r.Minor), r.Access)
}

// DeviceRules parses v1 devices.allow rules ("c 1:3 rwm", "c 136:* rwm",
// "b 8:0 r"). Types: c, b (a is refused: "all devices" is never what a
// job's group allows); major and minor: a number below 2^20 or *; access:
// a non-empty subset of rwm, each letter once. The error names the rule.
func DeviceRules(rules []string) ([]DeviceRule, error) {
	out := make([]DeviceRule, 0, len(rules))
	for _, s := range rules {
		f := strings.Fields(s)
		if len(f) != 3 {
			return nil, fmt.Errorf("device rule %q: want \"<c|b> <major>:<minor> <rwm>\"", s)
		}
		var r DeviceRule
		if f[0] != "c" && f[0] != "b" {
			return nil, fmt.Errorf("device rule %q: type %q is not c or b", s, f[0])
		}
		r.Type = f[0][0]
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
		if f[2] == "" || len(f[2]) > 3 || strings.Trim(f[2], "rwm") != "" ||
			strings.Count(f[2], "r") > 1 || strings.Count(f[2], "w") > 1 || strings.Count(f[2], "m") > 1 {
			return nil, fmt.Errorf("device rule %q: access %q is not a subset of rwm", s, f[2])
		}
		r.Access = f[2]
		out = append(out, r)
	}
	return out, nil
}

// devNumber parses a device major or minor: a number below 2^20 (the
// kernel's minor width; majors are 12 bits) or * (-1, any).
func devNumber(s string) (int64, error) {
	if s == "*" {
		return -1, nil
	}
	n, err := strconv.ParseUint(s, 10, 20)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number below 1048576 or *", s)
	}
	return int64(n), nil
}

// deviceProgram is the BPF_PROG_TYPE_CGROUP_DEVICE program that returns 1
// (allow) for an access the rules allow and 0 (EPERM) for every other. Its
// context is struct bpf_cgroup_dev_ctx: access_type (device type in the
// low 16 bits, BPF_DEVCG_DEV_*; access in the high 16, BPF_DEVCG_ACC_*),
// major, minor, each a u32.
func deviceProgram(rules []DeviceRule) asm.Instructions {
	p := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.And.Imm32(asm.R2, 0xffff), // R2: type
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word),
		asm.RSh.Imm32(asm.R3, 16),                // R3: access
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word), // R4: major
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word), // R5: minor
	}
	label := func(i int) string { return "rule_" + strconv.Itoa(i) }
	for i, r := range rules {
		next := label(i + 1)
		typ := int32(unix.BPF_DEVCG_DEV_CHAR)
		if r.Type == 'b' {
			typ = unix.BPF_DEVCG_DEV_BLOCK
		}
		var acc int32
		for _, c := range r.Access {
			acc |= map[rune]int32{'m': unix.BPF_DEVCG_ACC_MKNOD, 'r': unix.BPF_DEVCG_ACC_READ, 'w': unix.BPF_DEVCG_ACC_WRITE}[c]
		}
		block := asm.Instructions{asm.JNE.Imm(asm.R2, typ, next)}
		if other := ^acc & 7; other != 0 { // an access beyond the rule's
			block = append(block, asm.Mov.Reg32(asm.R1, asm.R3), asm.And.Imm32(asm.R1, other), asm.JNE.Imm(asm.R1, 0, next))
		}
		if r.Major >= 0 {
			block = append(block, asm.JNE.Imm(asm.R4, int32(r.Major), next))
		}
		if r.Minor >= 0 {
			block = append(block, asm.JNE.Imm(asm.R5, int32(r.Minor), next))
		}
		block = append(block, asm.Mov.Imm32(asm.R0, 1), asm.Return())
		block[0] = block[0].WithSymbol(label(i))
		p = append(p, block...)
	}
	deny := asm.Instructions{asm.Mov.Imm32(asm.R0, 0), asm.Return()}
	deny[0] = deny[0].WithSymbol(label(len(rules)))
	return append(p, deny...)
}

// attachDeviceProgram attaches to the v2 cgroup directory path a
// BPF_CGROUP_DEVICE program that allows the devices of rules (v1
// devices.allow syntax) and denies every other device (EPERM), then
// detaches any program attached to path itself before (a group made again
// in a directory an earlier run left). It attaches with BPF_F_ALLOW_MULTI,
// as systemd (DeviceAllow=) and runc do: the kernel runs the group's
// program and every program an ancestor attached with BPF_F_ALLOW_MULTI,
// and a device is allowed only when all of them allow it, so the group
// never widens what is above it. An ancestor whose program was attached
// with no flag (no descendant may attach) makes the attach fail (EPERM),
// and so the group's creation. One attached with BPF_F_ALLOW_OVERRIDE
// (Slurm's cgroup/v2 does so on its job and step directories, never on the
// levels above them, where the plugin's groups are) is replaced, for the
// group, by the group's program. The program is held by the cgroup, not by
// this process (BPF_PROG_ATTACH, not a bpf link): it stays after the
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
	var code bytes.Buffer
	if err := deviceProgram(rs).Marshal(&code, nativeOrder()); err != nil {
		return fmt.Errorf("cgroup %s: the device program: %w", path, err)
	}
	dirFd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	defer unix.Close(dirFd)
	old, err := devicePrograms(dirFd)
	if err != nil {
		return fmt.Errorf("cgroup %s: listing its device programs (BPF_PROG_QUERY): %w", path, err)
	}
	defer func() {
		for _, fd := range old {
			unix.Close(fd)
		}
	}()
	progFd, err := loadDeviceProgram(code.Bytes())
	if err != nil {
		return fmt.Errorf("cgroup %s: loading the device program (BPF_PROG_LOAD): %w", path, err)
	}
	defer unix.Close(progFd) // the attached program is the cgroup's
	if err := progAttach(unix.BPF_PROG_ATTACH, dirFd, progFd, unix.BPF_F_ALLOW_MULTI); err != nil {
		return fmt.Errorf("cgroup %s: attaching the device program (BPF_PROG_ATTACH, BPF_F_ALLOW_MULTI): %w", path, err)
	}
	for _, fd := range old {
		if err := progAttach(unix.BPF_PROG_DETACH, dirFd, fd, 0); err != nil {
			return fmt.Errorf("cgroup %s: detaching an earlier device program (BPF_PROG_DETACH): %w", path, err)
		}
	}
	return nil
}

// nativeOrder is this machine's byte order as binary.LittleEndian or
// binary.BigEndian (the encoder knows those two only).
func nativeOrder() binary.ByteOrder {
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}

func bpf(cmd uintptr, attr unsafe.Pointer, size uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, cmd, uintptr(attr), size)
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// loadDeviceProgram loads code (marshalled instructions) as a
// BPF_PROG_TYPE_CGROUP_DEVICE program and returns its fd. The program
// is charged to the memory cgroup (Linux 5.11 and later) or to
// RLIMIT_MEMLOCK (before): this never raises the limit, which the
// supervisor forked next would inherit; a few hundred bytes fit the
// default 64 KiB.
func loadDeviceProgram(code []byte) (int, error) {
	license := []byte("Apache-2.0\x00") // only GPL-only helpers check it; none is called
	attr := struct {
		progType, insnCnt uint32
		insns, license    uint64
		logLevel, logSize uint32
		logBuf            uint64
	}{
		progType: unix.BPF_PROG_TYPE_CGROUP_DEVICE,
		insnCnt:  uint32(len(code) / asm.InstructionSize),
		insns:    uint64(uintptr(unsafe.Pointer(&code[0]))),
		license:  uint64(uintptr(unsafe.Pointer(&license[0]))),
	}
	// The verifier gives up with EAGAIN when a signal is pending, and the
	// Go runtime signals its threads to preempt them (SIGURG): tried again,
	// as libbpf and cilium/ebpf do (5 attempts).
	var fd uintptr
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if fd, err = bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr), unsafe.Sizeof(attr)); !errors.Is(err, unix.EAGAIN) {
			break
		}
	}
	runtime.KeepAlive(code)
	runtime.KeepAlive(license)
	return int(fd), err
}

// progAttach is BPF_PROG_ATTACH or BPF_PROG_DETACH of program progFd, as
// BPF_CGROUP_DEVICE, on the cgroup directory dirFd.
func progAttach(cmd uintptr, dirFd, progFd int, flags uint32) error {
	attr := struct {
		targetFd, attachBpfFd, attachType, attachFlags uint32
	}{uint32(dirFd), uint32(progFd), unix.BPF_CGROUP_DEVICE, flags}
	_, err := bpf(cmd, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	return err
}

// devicePrograms opens the device programs attached to the cgroup
// directory dirFd itself (not its ancestors'): BPF_PROG_QUERY, then
// BPF_PROG_GET_FD_BY_ID for each. The caller closes the fds.
func devicePrograms(dirFd int) ([]int, error) {
	ids, err := deviceProgramIDs(dirFd)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, id := range ids {
		attr := struct{ id, next, flags uint32 }{id: id}
		fd, err := bpf(unix.BPF_PROG_GET_FD_BY_ID, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
		if errors.Is(err, unix.ENOENT) {
			continue // detached and freed meanwhile
		}
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, err
		}
		fds = append(fds, int(fd))
	}
	return fds, nil
}

// deviceProgramIDs are the ids of the device programs attached to the
// cgroup directory dirFd itself (BPF_PROG_QUERY; at most 64, the kernel's
// bound on programs per cgroup and attach type).
func deviceProgramIDs(dirFd int) ([]uint32, error) {
	ids := make([]uint32, 64)
	attr := struct {
		targetFd, attachType, queryFlags, attachFlags uint32
		progIDs                                       uint64
		progCnt, _                                    uint32
	}{targetFd: uint32(dirFd), attachType: unix.BPF_CGROUP_DEVICE, progIDs: uint64(uintptr(unsafe.Pointer(&ids[0]))), progCnt: uint32(len(ids))}
	_, err := bpf(unix.BPF_PROG_QUERY, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(ids)
	if err != nil {
		return nil, err
	}
	return ids[:attr.progCnt], nil
}

// isCgroup2 reports whether path is on a cgroup2 file system (statfs).
func isCgroup2(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// skipDevicePrograms leaves the program out (BenchmarkDeviceGroup's
// comparison only).
var skipDevicePrograms bool
