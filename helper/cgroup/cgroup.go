// Package cgroup owns the control group that holds everything the plugin
// starts for one job on one node: the supervisor, the collector, a container
// runtime and anything they start. The prolog creates it before the
// supervisor exists and starts the supervisor born inside it (StartInside:
// clone3 into the v2 directory, a discarded thread of its own for the v1
// ones; the prolog process never enters it); the epilog, after the drain,
// kills whatever is left in it and removes it. The levels above the job's
// group are shared by the node's jobs and never removed.
//
// The group is <mount>/<base>/<node>/job_<id> on every hierarchy the node
// mounts that the plugin uses: on cgroup v1 the memory, pids, devices,
// freezer, cpuset and cpuacct controllers, each on its own hierarchy; on
// cgroup v2 the unified hierarchy (/sys/fs/cgroup, or /sys/fs/cgroup/unified
// beside v1 controllers), with the memory, pids and cpu controllers enabled
// where the hierarchy offers them. On a systemd host with a unified tree
// the v2 group is made inside Slurm's delegated slurmstepd scope instead
// of at the mount, or nowhere (Place, placement.go). The v2 group is what makes the final kill
// atomic (cgroup.kill); without one, the v1 freezer freezes the group before
// every member is SIGKILLed, so nothing can fork away meanwhile.
//
// Limits: a hard memory bound (memory.limit_in_bytes and
// memory.memsw.limit_in_bytes on v1, memory.max and memory.swap.max on v2),
// a bound on the number of tasks (pids.max), and a device allow-list that
// admits only the pseudo-devices a collector needs (no GPU, no disk): the
// devices controller on v1, a device program on v2 (devices.go).
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Version is a cgroup hierarchy's version.
type Version int

// The two cgroup versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// Hierarchy is one mounted cgroup hierarchy.
type Hierarchy struct {
	Version Version
	// Mount is the mount point, e.g. /sys/fs/cgroup/memory (v1) or
	// /sys/fs/cgroup (v2).
	Mount string
	// Controllers are the v1 controllers bound to it (e.g. ["memory"]);
	// empty for v2.
	Controllers []string
	// ReadOnly: mounted read-only (an unprivileged container's view), so
	// no group can be made in it.
	ReadOnly bool
	// Root is the directory the plugin's groups are made below: "" for
	// Mount itself; on a systemd host's unified hierarchy, Slurm's
	// delegated slurmstepd scope (Place).
	Root string
}

// root is the directory the groups are made below (Root, else Mount).
func (h Hierarchy) root() string {
	if h.Root != "" {
		return h.Root
	}
	return h.Mount
}

// Writable are the hierarchies of hs that are not mounted read-only: where
// a group can be made.
func Writable(hs []Hierarchy) []Hierarchy {
	var out []Hierarchy
	for _, h := range hs {
		if !h.ReadOnly {
			out = append(out, h)
		}
	}
	return out
}

// v1Used are the v1 controllers the plugin places its groups in.
var v1Used = []string{"memory", "pids", "devices", "freezer", "cpuset", "cpuacct"}

// DefaultPidsMax is the tasks bound (pids.max) of a job's group: threads
// count, and a collector has about 30.
const DefaultPidsMax = 1024

// DeviceAllow is the v1 device allow-list of a job's group (devices.allow
// rules): /dev/null, zero, full, random, urandom, tty, ptmx, the pty slaves
// and /dev/fuse (for unprivileged container runtimes). Everything else,
// GPUs and disks included, is denied.
var DeviceAllow = []string{
	"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
	"c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm", "c 10:229 rwm",
}

// Discover reads the cgroup hierarchies of this node from mountinfo
// (normally /proc/self/mountinfo): the v1 ones whose controllers the plugin
// uses and the v2 one, if any.
func Discover(mountinfo string) ([]Hierarchy, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(io.LimitReader(f, 4<<20))
}

func parseMountinfo(r io.Reader) ([]Hierarchy, error) {
	return parseMountinfoFor(r, v1Used)
}

// parseMountinfoFor reads the v2 hierarchy and the v1 ones that bind any
// of the controllers used (Hierarchy.Controllers: those of used it binds).
func parseMountinfoFor(r io.Reader, used []string) ([]Hierarchy, error) {
	r = io.LimitReader(r, 4<<20)
	var out []Hierarchy
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || pf[3] != "/" {
			continue // only whole hierarchies, not bind mounts of a subtree
		}
		mount := unescapeMount(pf[4])
		ro := len(pf) > 5 && slices.Contains(strings.Split(pf[5], ","), "ro")
		switch qf[0] {
		case "cgroup2":
			out = append(out, Hierarchy{Version: V2, Mount: mount, ReadOnly: ro})
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(qf[2], ",") {
				if slices.Contains(used, o) {
					ctrls = append(ctrls, o)
				}
			}
			if len(ctrls) > 0 {
				out = append(out, Hierarchy{Version: V1, Mount: mount, Controllers: ctrls, ReadOnly: ro})
			}
		}
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Limits bound a job's group.
type Limits struct {
	// MemoryBytes is the hard memory bound (0: none). Swap is bounded to
	// the same total (no swap beyond it).
	MemoryBytes int64
	// PidsMax bounds the tasks (threads) of the group (0: DefaultPidsMax).
	PidsMax int
	// Devices are the devices the group may use, v1 devices.allow rules
	// (nil: DeviceAllow); every other device is denied: on v1 by the
	// devices controller, on v2 by a device program (BPF_CGROUP_DEVICE).
	Devices []string
}

func (l Limits) devices() []string {
	if l.Devices == nil {
		return DeviceAllow
	}
	return l.Devices
}

// dir is the group's directory in one hierarchy.
type dir struct {
	h    Hierarchy
	path string
}

func (d dir) has(ctrl string) bool { return slices.Contains(d.h.Controllers, ctrl) }

// Group is one job's cgroup on one node, a directory in each hierarchy.
type Group struct {
	// Rel is the group's path below each mount: <base>/<node>/job_<id>.
	Rel string
	// Retried are the errors of Create's failed attempts before the one
	// that made the group (none when the first one did).
	Retried []error
	dirs    []dir
}

// RelPath is <base>/<node>/job_<id>, the group's path below each mount.
// node must be a plain name (no '/', not . or ..).
func RelPath(base, node string, jobID uint32) (string, error) {
	if node == "" || strings.ContainsAny(node, "/\x00") || node == "." || node == ".." {
		return "", fmt.Errorf("node name %q is not usable in a cgroup path", node)
	}
	return filepath.Join(base, node, GroupName(strconv.FormatUint(uint64(jobID), 10))), nil
}

// GroupName is the last element of the plugin's group of job jobID
// (decimal) on every hierarchy: job_<id>, as Slurm names its own job
// groups.
func GroupName(jobID string) string { return groupPrefix + jobID }

// groupPrefix starts GroupName.
const groupPrefix = "job_"

// GroupJobID is the job id of a directory named name by GroupName, and
// whether name is one.
func GroupJobID(name string) (uint32, bool) {
	n, ok := strings.CutPrefix(name, groupPrefix)
	id, err := strconv.ParseUint(n, 10, 32)
	return uint32(id), ok && err == nil
}

// Base is the directory, below each cgroup hierarchy's mount, that holds
// the plugin's groups: <mount>/gym_otel/<cluster>/<node>/job_<id> (job ids
// are per cluster; <cluster> is SLURM_CLUSTER_NAME).
const Base = "gym_otel"

// ClusterBase is Base/<cluster>, or Base without a usable cluster name.
func ClusterBase(cluster string) string {
	if cluster == "" || strings.ContainsAny(cluster, "/\x00") || cluster == "." || cluster == ".." {
		return Base
	}
	return Base + "/" + cluster
}

// JobPath is the one builder of the path of the plugin's group of job
// jobID of cluster on node, below each mount:
// <Base>/<cluster>/<node>/job_<id> (ClusterBase, RelPath): the prolog
// makes it there, the epilog and the sweep of orphans open it there.
// Errors: a node name not usable in a path.
func JobPath(cluster, node string, jobID uint32) (string, error) {
	return RelPath(ClusterBase(cluster), node, jobID)
}

// NodePath is the directory below each mount that holds the node's job
// groups of cluster (JobPath's parent): <Base>/<cluster>/<node>.
func NodePath(cluster, node string) (string, error) {
	rel, err := JobPath(cluster, node, 0)
	return filepath.Dir(rel), err
}

// CreateAttempts is how many times Create tries to make a group before it
// gives up (a level removed by something else meanwhile, an rmdir of a
// dying group of the same path not yet done).
const CreateAttempts = 3

// Create makes the group rel in every hierarchy of hs, with the limits
// lim, replacing a group of the same path left by an earlier run of the job
// (its processes are killed first). Parents are created root-only (0755) as
// needed. A failed attempt is undone and tried again, up to CreateAttempts
// times in all (the failed attempts' errors are in the group's Retried);
// the last error is returned when every attempt failed.
func Create(hs []Hierarchy, rel string, lim Limits) (*Group, error) {
	if len(hs) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	var retried []error
	for attempt := 1; ; attempt++ {
		g, err := create(hs, rel, lim)
		if err == nil {
			g.Retried = retried
			return g, nil
		}
		if attempt >= CreateAttempts {
			return nil, fmt.Errorf("%w (attempt %d of %d)", err, attempt, CreateAttempts)
		}
		retried = append(retried, err)
		time.Sleep(time.Duration(attempt) * 20 * time.Millisecond)
	}
}

func create(hs []Hierarchy, rel string, lim Limits) (*Group, error) {
	if old := Open(hs, rel); len(old.dirs) > 0 {
		_, _ = old.Kill(5 * time.Second)
		_ = old.Remove()
	}
	g := &Group{Rel: rel}
	for _, h := range hs {
		d := dir{h: h, path: filepath.Join(h.root(), rel)}
		if err := makeDir(h, d.path); err != nil {
			_ = g.Remove()
			return nil, err
		}
		g.dirs = append(g.dirs, d)
		if err := g.limit(d, lim); err != nil {
			_ = g.Remove()
			return nil, err
		}
	}
	return g, nil
}

// makeDir creates path and its parents below h's root (Mount, or the
// delegated scope Place found), preparing each new level: cpuset's cpus
// and mems copied from the parent (v1: a new cpuset is empty), and on v2
// the parent's available controllers among memory, pids and cpu enabled
// for the children.
func makeDir(h Hierarchy, path string) error {
	rel, err := filepath.Rel(h.root(), path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("%s is not below %s", path, h.root())
	}
	cur := h.root()
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		parent := cur
		cur = filepath.Join(cur, part)
		if h.Version == V2 {
			enableControllers(parent)
		}
		if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", cur, err)
		}
		fi, err := os.Lstat(cur)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("cgroup %s: not a directory", cur)
		}
		if slices.Contains(h.Controllers, "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				if cur, _ := readSmall(filepath.Join(cur, f)); strings.TrimSpace(cur) != "" {
					continue
				}
				v, err := readSmall(filepath.Join(parent, f))
				if err != nil {
					return err
				}
				if err := write(filepath.Join(cur, f), strings.TrimSpace(v)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// enableControllers enables memory, pids, cpu and cpuset for dir's children where
// dir offers them (v2). Best effort: a controller the kernel or a parent
// does not offer is skipped.
func enableControllers(dir string) {
	have, err := readSmall(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return
	}
	on, _ := readSmall(filepath.Join(dir, "cgroup.subtree_control"))
	for _, c := range []string{"memory", "pids", "cpu", "cpuset"} {
		if slices.Contains(strings.Fields(have), c) && !slices.Contains(strings.Fields(on), c) {
			_ = write(filepath.Join(dir, "cgroup.subtree_control"), "+"+c)
		}
	}
}

func (g *Group) limit(d dir, lim Limits) error {
	pids := lim.PidsMax
	if pids <= 0 {
		pids = DefaultPidsMax
	}
	switch d.h.Version {
	case V1:
		if d.has("memory") && lim.MemoryBytes > 0 {
			if err := setMemoryV1(d.path, lim.MemoryBytes); err != nil {
				return err
			}
		}
		if d.has("pids") {
			if err := write(filepath.Join(d.path, "pids.max"), strconv.Itoa(pids)); err != nil {
				return err
			}
		}
		if d.has("devices") {
			if err := write(filepath.Join(d.path, "devices.deny"), "a"); err != nil {
				return err
			}
			for _, rule := range lim.devices() {
				if err := write(filepath.Join(d.path, "devices.allow"), rule); err != nil {
					return err
				}
			}
		}
	case V2:
		if lim.MemoryBytes > 0 && exists(filepath.Join(d.path, "memory.max")) {
			if err := write(filepath.Join(d.path, "memory.max"), strconv.FormatInt(lim.MemoryBytes, 10)); err != nil {
				return err
			}
			if exists(filepath.Join(d.path, "memory.swap.max")) {
				_ = write(filepath.Join(d.path, "memory.swap.max"), "0")
			}
		}
		if exists(filepath.Join(d.path, "pids.max")) {
			if err := write(filepath.Join(d.path, "pids.max"), strconv.Itoa(pids)); err != nil {
				return err
			}
		}
		if isCgroup2(d.path) { // else a stand-in tree of a test
			if err := attachDeviceProgram(d.path, lim.devices()); err != nil {
				return err
			}
		}
	}
	return nil
}

// setMemoryV1 sets memory.limit_in_bytes and, where swap is accounted,
// memory.memsw.limit_in_bytes to n. memsw must stay >= the memory limit,
// so the order depends on the direction.
func setMemoryV1(path string, n int64) error {
	mem := filepath.Join(path, "memory.limit_in_bytes")
	sw := filepath.Join(path, "memory.memsw.limit_in_bytes")
	v := strconv.FormatInt(n, 10)
	if !exists(sw) {
		return write(mem, v)
	}
	cur, _ := readInt(mem)
	if cur > 0 && n > cur {
		if err := write(sw, v); err != nil {
			return err
		}
		return write(mem, v)
	}
	if err := write(mem, v); err != nil {
		return err
	}
	return write(sw, v)
}

// MemoryLimitFile is the file of the group's hard memory bound
// (memory.limit_in_bytes on v1, memory.max on v2), "" when no hierarchy
// bounds memory.
func (g *Group) MemoryLimitFile() string {
	for _, d := range g.dirs {
		if d.h.Version == V1 && d.has("memory") {
			return filepath.Join(d.path, "memory.limit_in_bytes")
		}
		if d.h.Version == V2 && exists(filepath.Join(d.path, "memory.max")) {
			return filepath.Join(d.path, "memory.max")
		}
	}
	return ""
}

// CpusetFile is the file of the group's CPU set (cpuset.cpus, v1 or v2),
// "" when no hierarchy bounds CPUs. Steps narrow it to the CPUs of the
// job's steps on the node (spank/cgroup.c).
func (g *Group) CpusetFile() string {
	for _, d := range g.dirs {
		if (d.h.Version == V1 && d.has("cpuset")) || (d.h.Version == V2 && exists(filepath.Join(d.path, "cpuset.cpus"))) {
			return filepath.Join(d.path, "cpuset.cpus")
		}
	}
	return ""
}

// Open returns the group rel as it exists in hs (the directories that are
// there); an empty Group when none is.
func Open(hs []Hierarchy, rel string) *Group {
	g := &Group{Rel: rel}
	for _, h := range hs {
		p := filepath.Join(h.root(), rel)
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			g.dirs = append(g.dirs, dir{h: h, path: p})
		}
	}
	return g
}

// Anchored reports whether the group has a directory in a hierarchy its
// processes cannot leave: the v2 one (a move needs write access to the
// cgroup.procs of the common ancestor, the group's root-owned parents) or
// the v1 pids one. v1 lets a process of the user's uid move into any
// group whose cgroup.procs the user can write, and Slurm's cgroup/v1
// makes the job's step directories the user's in the freezer, cpuset,
// memory, cpuacct (and devices) hierarchies: their cgroup.procs stay
// root's, but the user can make a group inside them, whose files are the
// user's, and move a process there. Slurm makes no group in pids, so the
// user owns none there. The group's kill finds a process in an anchor
// wherever else it moved (Pids is the union over the hierarchies).
func (g *Group) Anchored() bool {
	for _, d := range g.dirs {
		if d.h.Version == V2 || d.has("pids") {
			return true
		}
	}
	return false
}

// Exists reports whether the group has a directory in any hierarchy.
func (g *Group) Exists() bool { return len(g.dirs) > 0 }

// V2 returns the group's directory in the unified (v2) hierarchy and that
// hierarchy's mount point; ok is false when the group has none.
func (g *Group) V2() (dir, mount string, ok bool) {
	for _, d := range g.dirs {
		if d.h.Version == V2 {
			return d.path, d.h.Mount, true
		}
	}
	return "", "", false
}

// Dirs are the group's directories, one per hierarchy.
func (g *Group) Dirs() []string {
	out := make([]string, len(g.dirs))
	for i, d := range g.dirs {
		out[i] = d.path
	}
	return out
}

// Join moves the calling process (all its threads) into the group in every
// hierarchy, so that the children it forks from now on are born inside.
// restore moves it back where it was; call it right after the fork.
func (g *Group) Join() (restore func() error, err error) {
	self, err := ProcCgroups("self")
	if err != nil {
		return nil, err
	}
	var back []string // cgroup.procs files to return to
	restore = func() error {
		var errs []error
		for _, f := range back {
			if err := write(f, strconv.Itoa(os.Getpid())); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, d := range g.dirs {
		cur, ok := self.pathIn(d.h)
		if !ok {
			_ = restore()
			return nil, fmt.Errorf("cgroup %s: this process's place in it is unknown", d.h.Mount)
		}
		if err := write(filepath.Join(d.path, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			_ = restore()
			return nil, err
		}
		back = append(back, filepath.Join(d.h.Mount, cur, "cgroup.procs"))
	}
	return restore, nil
}

// Contains reports whether process pid is in the group, in every hierarchy
// the group has (a process the user could have moved elsewhere is not).
func (g *Group) Contains(pid int) bool {
	if len(g.dirs) == 0 {
		return false
	}
	pc, err := ProcCgroups(strconv.Itoa(pid))
	if err != nil {
		return false
	}
	for _, d := range g.dirs {
		p, ok := pc.pathIn(d.h)
		if !ok || filepath.Join(d.h.Mount, p) != d.path {
			return false
		}
	}
	return true
}

// Pids lists the group's processes (the union over hierarchies).
func (g *Group) Pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, d := range g.dirs {
		data, err := readBounded(filepath.Join(d.path, "cgroup.procs"), 1<<20)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(data) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// Kill ends every process of the group and waits, up to timeout, until the
// group is empty. With a v2 directory it writes cgroup.kill (atomic: no
// fork escapes); else, with a v1 freezer, it freezes the group, SIGKILLs
// each member and thaws it (the kill lands on thaw); else it SIGKILLs the
// members it sees, repeatedly. It returns how many processes it found.
func (g *Group) Kill(timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	found := len(g.Pids())
	if found == 0 {
		return 0, nil
	}
	var v2kill, freezer string
	for _, d := range g.dirs {
		if d.h.Version == V2 && exists(filepath.Join(d.path, "cgroup.kill")) {
			v2kill = filepath.Join(d.path, "cgroup.kill")
		}
		if d.h.Version == V1 && d.has("freezer") {
			freezer = filepath.Join(d.path, "freezer.state")
		}
	}
	for {
		switch {
		case v2kill != "":
			_ = write(v2kill, "1")
		case freezer != "":
			_ = write(freezer, "FROZEN")
			for i := 0; i < 100; i++ { // FREEZING until every task is frozen
				if s, _ := readSmall(freezer); strings.TrimSpace(s) == "FROZEN" {
					break
				}
				time.Sleep(time.Millisecond)
			}
			for _, pid := range g.Pids() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = write(freezer, "THAWED")
		default:
			for _, pid := range g.Pids() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for i := 0; i < 10; i++ {
			if len(g.Pids()) == 0 && !g.populated() {
				return found, nil
			}
			time.Sleep(10 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			return found, fmt.Errorf("cgroup %s: %d processes left after %s", g.Rel, len(g.Pids()), timeout)
		}
	}
}

// populated reports whether a v2 directory of the group still counts a
// task (cgroup.events "populated 1"). cgroup.procs leaves out a process
// that is exiting, still releasing its memory: the count drops only once it
// has passed the kernel's cgroup exit, so Kill returns when its processes
// are gone or zombies, not merely dying.
func (g *Group) populated() bool {
	for _, d := range g.dirs {
		if d.h.Version != V2 {
			continue
		}
		if ev, err := readSmall(filepath.Join(d.path, "cgroup.events")); err == nil && strings.Contains(ev, "populated 1") {
			return true
		}
	}
	return false
}

// Remove removes the group's directories (they must be empty: Kill first).
// It never removes the levels above them (<base>/<node>): those are shared
// by every job of the node, and another job's Create may be walking them
// at this very moment (a removed level made its mkdir fail with ENOENT).
// They are a few empty directories per node, kept for the node's life; no
// lock is taken instead, so no job's prolog ever waits on another's epilog.
func (g *Group) Remove() error {
	var errs []error
	for _, d := range g.dirs {
		if err := removeWithRetry(d.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	g.dirs = nil
	return errors.Join(errs...)
}

// removeWithRetry rmdirs a cgroup; a dying task can keep it busy briefly.
func removeWithRetry(p string) error {
	return removeUntil(p, time.Now().Add(500*time.Millisecond))
}

// removeUntil rmdirs p, trying again every 10 ms until deadline (at least
// once).
func removeUntil(p string, deadline time.Time) error {
	for {
		err := os.Remove(p)
		if err == nil || errors.Is(err, os.ErrNotExist) || !time.Now().Add(10*time.Millisecond).Before(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RemoveBy removes the group's directories like Remove, but all of them
// by deadline: each is tried at least once, and retried (a dying task can
// keep a group busy briefly, EBUSY) only while the deadline is not reached.
// The directories it could not remove stay in the group (Exists, Dirs), for
// a later attempt; the error names each with its last error.
func (g *Group) RemoveBy(deadline time.Time) error {
	var errs []error
	var left []dir
	for _, d := range g.dirs {
		if err := removeUntil(d.path, deadline); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			left = append(left, d)
		}
	}
	g.dirs = left
	return errors.Join(errs...)
}

// Usage is what the group has cost so far.
type Usage struct {
	// MemoryPeakBytes is the highest memory charge (v1
	// memory.max_usage_in_bytes, v2 memory.peak); 0 when unknown.
	MemoryPeakBytes int64
	// MemoryLimitBytes is the hard bound in force; 0 when none.
	MemoryLimitBytes int64
	// CPUSeconds is the CPU time used (v1 cpuacct.usage, v2 cpu.stat
	// usage_usec); 0 when unknown.
	CPUSeconds float64
	// OOMKills counts processes the kernel killed at the memory bound.
	OOMKills int64
	// CPUs is the group's CPU set as a cpulist ("0-3"), "" when none.
	CPUs string
}

// Usage reads the group's counters.
func (g *Group) Usage() Usage {
	var u Usage
	if f := g.CpusetFile(); f != "" {
		if c, err := readSmall(f); err == nil {
			u.CPUs = strings.TrimSpace(c)
		}
	}
	for _, d := range g.dirs {
		switch d.h.Version {
		case V1:
			if d.has("memory") {
				u.MemoryPeakBytes, _ = readInt(filepath.Join(d.path, "memory.max_usage_in_bytes"))
				u.MemoryLimitBytes, _ = readInt(filepath.Join(d.path, "memory.limit_in_bytes"))
				if s, err := readSmall(filepath.Join(d.path, "memory.oom_control")); err == nil {
					u.OOMKills = keyed(s, "oom_kill")
				}
			}
			if d.has("cpuacct") {
				if ns, err := readInt(filepath.Join(d.path, "cpuacct.usage")); err == nil {
					u.CPUSeconds = float64(ns) / 1e9
				}
			}
		case V2:
			if n, err := readInt(filepath.Join(d.path, "memory.peak")); err == nil && u.MemoryPeakBytes == 0 {
				u.MemoryPeakBytes = n
			}
			if n, err := readInt(filepath.Join(d.path, "memory.max")); err == nil && u.MemoryLimitBytes == 0 {
				u.MemoryLimitBytes = n
			}
			if s, err := readSmall(filepath.Join(d.path, "cpu.stat")); err == nil && u.CPUSeconds == 0 {
				u.CPUSeconds = float64(keyed(s, "usage_usec")) / 1e6
			}
			if s, err := readSmall(filepath.Join(d.path, "memory.events")); err == nil && u.OOMKills == 0 {
				u.OOMKills = keyed(s, "oom_kill")
			}
		}
	}
	return u
}

// keyed returns the value of "key N" lines (cpu.stat, memory.events).
func keyed(s, key string) int64 {
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// Cgroups is a process's place in each hierarchy, from /proc/<pid>/cgroup.
type Cgroups struct {
	// V1 maps a v1 controller to the process's path in its hierarchy.
	V1 map[string]string
	// V2 is the process's path in the unified hierarchy ("" if none).
	V2    string
	hasV2 bool
}

// ProcCgroups reads /proc/<pid>/cgroup (pid "self" for this process).
func ProcCgroups(pid string) (Cgroups, error) {
	data, err := readBounded("/proc/"+pid+"/cgroup", 64*1024)
	if err != nil {
		return Cgroups{}, err
	}
	return parseProcCgroup(data), nil
}

func parseProcCgroup(data string) Cgroups {
	c := Cgroups{V1: map[string]string{}}
	for _, line := range strings.Split(data, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			c.V2, c.hasV2 = parts[2], true
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			c.V1[ctrl] = parts[2]
		}
	}
	return c
}

// pathIn is the process's path in hierarchy h.
func (c Cgroups) pathIn(h Hierarchy) (string, bool) {
	if h.Version == V2 {
		return c.V2, c.hasV2
	}
	for _, ctrl := range h.Controllers {
		if p, ok := c.V1[ctrl]; ok {
			return p, true
		}
	}
	return "", false
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func write(p, v string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup: writing %q to %s: %w", v, p, err)
	}
	return nil
}

// readBounded reads at most max bytes of p.
func readBounded(p string, max int64) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max))
	return string(b), err
}

func readSmall(p string) (string, error) { return readBounded(p, 64*1024) }

func readInt(p string) (int64, error) {
	s, err := readSmall(p)
	if err != nil {
		return 0, err
	}
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// GroupRoot is the directory the plugin's groups are made below in h:
// Root, else Mount.
func (h Hierarchy) GroupRoot() string { return h.root() }
