package cgroup

// Where the groups live on a systemd host.
//
// Where systemd is PID 1 and the tree is unified (cgroup v2 only), the
// tree has one writer: systemd, which hands a subtree to a program only
// through a unit with Delegate=yes, and may undo anything made outside
// one. Slurm's cgroup/v2 (src/plugins/cgroup/v2/cgroup_v2.c) has slurmd
// ask systemd (D-Bus StartTransientUnit, Delegate=yes) for the scope
// <init>/<CgroupSlice, default system.slice>/slurmstepd.scope
// (<node>_slurmstepd.scope where Slurm was built for several slurmd per
// host), where <init> is the parent of PID 1's cgroup (the mount itself
// unless systemd runs in a container). It keeps `slurmstepd infinity` in
// its `system` directory so the scope never empties, enables the
// controllers in the scope's cgroup.subtree_control, and makes every job's
// job_<id> directory in it. The plugin's groups live there too, beside
// them: <scope>/gym_otel/<cluster>/<node>/job_<id>, made, bounded and
// removed as anywhere else (Create, Remove); Slurm never touches a
// directory of the scope that is not its own job_<id> or system.
//
// What systemd's own operations do to them (systemd's delegation rules;
// checked on a systemd guest by TestSystemdPlacement):
//   - daemon-reload, daemon-reexec: systemd re-applies each unit's own
//     settings to the unit's cgroup (the scope's; Slurm moves nothing
//     there), and leaves the delegated subtree below it alone: the groups,
//     their bounds and device programs stay.
//   - a slurmd restart or stop: the scope is its own unit, not part of
//     slurmd.service; it stays while anything is in it (the sleep, every
//     job's processes, the plugin's supervisors and collectors), and a
//     slurmd started again finds it and uses it. The groups stay, and the
//     epilog ends them as usual.
//   - systemctl stop slurmstepd.scope: systemd kills every process of the
//     scope, the plugin's included, and removes the whole subtree; a
//     later prolog finds no scope (see below) until slurmd makes one.
//   - a reboot mid-job: the cgroup tree and its programs go with the
//     kernel; the next prolog's sweep removes the job's record, and finds
//     no group to end.
//
// Where no such scope exists (Slurm without cgroup/v2, proctrack/linuxproc
// alone), Place says so (ErrNoDelegatedScope): cgroup=required refuses the
// collector, cgroup=auto runs it without a group and says why. A
// transient scope of the plugin's own (D-Bus) was weighed and not built:
// a scope must be given a process when it is made, is stopped when it
// empties, and would add a D-Bus client (godbus, go-systemd) and a
// round-trip to systemd to every prolog of the core loaded into slurmd;
// nodes that run Slurm under systemd with cgroup/v2 have the scope.
//
// A hybrid host (systemd, v1 controllers and a v2 tree at
// /sys/fs/cgroup/unified) keeps the groups at the top of each hierarchy,
// as Slurm's cgroup/v1 does: systemd writes only its own name=systemd and
// unified trees there, and Slurm's cgroup/v1 makes no delegated scope.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// ErrNoDelegatedScope: systemd runs the node's unified cgroup tree and no
// delegated slurmstepd scope was found to make the groups in.
var ErrNoDelegatedScope = errors.New("no delegated slurmstepd scope")

// SystemdHost reports whether systemd is this node's init system (as
// sd_booted(3): /run/systemd/system is a directory).
func SystemdHost() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// Place sets, in the hierarchies hs, where the node's groups are made
// (Hierarchy.Root). On a systemd host whose tree is unified (hs holds a
// v2 hierarchy and no v1 one) it is Slurm's delegated slurmstepd scope
// (StepdScope, for node); if there is none the error wraps
// ErrNoDelegatedScope and names what was looked for. Elsewhere the groups
// are made at each hierarchy's mount, and hs is returned as it is.
func Place(hs []Hierarchy, node string) ([]Hierarchy, error) {
	if !SystemdHost() {
		return hs, nil
	}
	pid1, err := ProcCgroups("1")
	if err != nil {
		return nil, fmt.Errorf("systemd host: PID 1's cgroup: %w", err)
	}
	return place(hs, node, pid1)
}

// place is Place on a systemd host whose PID 1 is in pid1.
func place(hs []Hierarchy, node string, pid1 Cgroups) ([]Hierarchy, error) {
	v2 := -1
	for i, h := range hs {
		if h.Version == V1 {
			return hs, nil // hybrid: see the file's comment
		}
		v2 = i
	}
	if v2 < 0 {
		return hs, nil
	}
	if !pid1.hasV2 {
		return nil, fmt.Errorf("systemd host: PID 1 has no place in the cgroup v2 tree %s", hs[v2].Mount)
	}
	scope, looked := StepdScope(hs[v2].Mount, pid1.V2, node)
	if scope == "" {
		return nil, fmt.Errorf("%w: systemd runs this node's cgroup tree, and the plugin makes no cgroup outside a unit systemd delegated; Slurm's cgroup/v2 plugin (CgroupPlugin=cgroup/v2 in cgroup.conf) makes the scope, and none of %s is there", ErrNoDelegatedScope, strings.Join(looked, ", "))
	}
	out := append([]Hierarchy(nil), hs...)
	out[v2].Root = scope
	return out, nil
}

// StepdScope finds Slurm's delegated scope for slurmstepd in the v2 tree
// mounted at mount, PID 1 being at pid1Path in it ("/init.scope"): a
// directory <init>/<slice>/<node>_slurmstepd.scope or
// <init>/<slice>/slurmstepd.scope (node's first), <slice> being
// system.slice, else any *.slice directly below <init> (Slurm's
// CgroupSlice=), with Slurm's `system` directory in it, owned by root and
// not a symbolic link. It returns the scope ("" when none) and the
// patterns it looked for.
func StepdScope(mount, pid1Path, node string) (string, []string) {
	base := mount
	if p := filepath.Clean("/" + pid1Path); p != "/" {
		base = filepath.Dir(filepath.Join(mount, p))
	}
	names := []string{"slurmstepd.scope"}
	if node != "" && !strings.ContainsAny(node, "/\x00*?[") {
		names = []string{node + "_slurmstepd.scope", "slurmstepd.scope"}
	}
	sls, _ := filepath.Glob(filepath.Join(base, "*.slice"))
	sort.SliceStable(sls, func(i, j int) bool { // system.slice first
		return filepath.Base(sls[i]) == "system.slice" && filepath.Base(sls[j]) != "system.slice"
	})
	var looked []string
	for _, name := range names {
		looked = append(looked, filepath.Join(base, "*.slice", name))
		for _, sl := range sls {
			p := filepath.Join(sl, name)
			if delegatedScope(p) {
				return p, looked
			}
		}
	}
	return "", looked
}

// delegatedScope: p is a root-owned directory (not a link) holding
// Slurm's system directory.
func delegatedScope(p string) bool {
	fi, err := os.Lstat(p)
	if err != nil || !fi.IsDir() {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
		return false
	}
	sys, err := os.Lstat(filepath.Join(p, "system"))
	return err == nil && sys.IsDir()
}
