package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

func TestDeviceRules(t *testing.T) {
	rs, err := DeviceRules([]string{"c 1:3 rwm", "c 136:* rw", "b 8:0 r"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.String())
	}
	if want := "c 1:3 rwm|c 136:* rw|b 8:0 r"; strings.Join(got, "|") != want {
		t.Fatalf("got %q, want %q", strings.Join(got, "|"), want)
	}
	for _, bad := range []string{"a *:* rwm", "c 1:3", "c 1-3 rwm", "c x:3 rwm", "c 1:3 rwx", "c 1:3 rwmm", "c 1:1048576 r", "c -1:3 r"} {
		if _, err := DeviceRules([]string{bad}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("rule %q: error %v does not name it", bad, err)
		}
	}
}

// v2Only is the node's writable unified hierarchy (skips without one): the
// device tests leave the v1 devices controller out, so that what they see
// is the program's doing alone.
func v2Only(t testing.TB) []Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (cgroup tests)")
	}
	hs, _ := Discover("/proc/self/mountinfo")
	for _, h := range Writable(hs) {
		if h.Version == V2 {
			// On a systemd host with a unified tree: in Slurm's delegated
			// scope where there is one, as the plugin's groups.
			if placed, err := Place([]Hierarchy{h}, ""); err == nil {
				h = placed[0]
			}
			t.Cleanup(func() {
				_ = os.Remove(filepath.Join(h.GroupRoot(), "gym_otel_test", "dev"))
				if h.Root != "" {
					_ = os.Remove(filepath.Join(h.GroupRoot(), "gym_otel_test"))
				}
			})
			return []Hierarchy{h}
		}
	}
	testenv.Missing(t, "a writable cgroup v2 hierarchy")
	return nil
}

// openFromInside starts this test binary born inside g (StartInside) to
// open each of paths for reading and writing, and returns what each open
// gave: "ok" or the errno's name.
func openFromInside(t *testing.T, g *Group, paths ...string) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeviceOpenHelper$")
	cmd.Env = append(os.Environ(), "GYM_OTEL_DEVOPEN="+strings.Join(paths, "\n"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends here
		errc <- g.StartInside(cmd)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out.String())
	}
	res := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if p, r, ok := strings.Cut(line, "\t"); ok && strings.HasPrefix(p, "/") {
			res[p] = r
		}
	}
	return res
}

// TestDeviceOpenHelper is the process openFromInside starts: it opens the
// paths GYM_OTEL_DEVOPEN lists and prints "<path>\t<ok|ERRNO>".
func TestDeviceOpenHelper(t *testing.T) {
	list := os.Getenv("GYM_OTEL_DEVOPEN")
	if list == "" {
		t.Skip("the child of the device tests")
	}
	for _, p := range strings.Split(list, "\n") {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		r := "ok"
		if err != nil {
			r = unix.ErrnoName(err.(syscall.Errno))
		} else {
			unix.Close(fd)
		}
		fmt.Printf("%s\t%s\n", p, r)
	}
}

// gpuNodes makes character devices with NVIDIA's major (195) and minors
// 0 and 1 in a temporary directory. No driver has the major here, so an
// open the device program allows fails ENXIO, and one it denies EPERM.
func gpuNodes(t *testing.T) (nv0, nv1 string) {
	dir := t.TempDir()
	if nodev(dir) { // a tmpfs /tmp mounted nodev (systemd's): the package's directory instead
		d, err := os.MkdirTemp(".", "devtest")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		if dir, _ = filepath.Abs(d); nodev(dir) {
			testenv.Missing(t, "a file system without nodev for device nodes ("+os.TempDir()+" and "+dir+" are nodev)")
		}
	}
	nv0, nv1 = filepath.Join(dir, "nvidia0"), filepath.Join(dir, "nvidia1")
	for i, p := range []string{nv0, nv1} {
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(i)))); err != nil {
			testenv.Missing(t, "mknod of a character device in "+dir+": "+err.Error())
		}
	}
	return nv0, nv1
}

// nodev reports whether dir's file system is mounted nodev (device nodes
// there never open).
func nodev(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NODEV != 0
}

// TestDeviceProgram attaches the group's device program on the node's real
// unified hierarchy and opens devices from a process born inside it: the
// default list's /dev/null and /dev/zero open, a GPU does not (EPERM); a
// list with GPU 0 added opens GPU 0 (the driver's ENXIO) and still not
// GPU 1. The program goes with the group.
func TestDeviceProgram(t *testing.T) {
	hs := v2Only(t)
	nv0, nv1 := gpuNodes(t)
	for _, c := range []struct {
		name    string
		devices []string
		want    map[string]string
	}{
		{"default", nil, map[string]string{"/dev/null": "ok", "/dev/zero": "ok", nv0: "EPERM", nv1: "EPERM"}},
		{"gpu0", append(slices.Clone(DeviceAllow), "c 195:0 rw"), map[string]string{"/dev/null": "ok", nv0: "ENXIO", nv1: "EPERM"}},
		{"gpu0-read", append(slices.Clone(DeviceAllow), "c 195:0 r"), map[string]string{"/dev/null": "ok", nv0: "EPERM"}}, // opened rw
		{"none", []string{}, map[string]string{"/dev/null": "EPERM", nv0: "EPERM"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rel := filepath.Join("gym_otel_test", "dev", c.name)
			g, err := Create(hs, rel, Limits{MemoryBytes: 64 << 20, Devices: c.devices})
			if err != nil {
				t.Fatal(err)
			}
			dir := g.Dirs()[0]
			progs := attachedDevicePrograms(t, dir)
			if len(progs) != 1 {
				t.Errorf("%s: device programs %v attached, want 1", dir, progs)
			}
			for _, id := range progs {
				if !programLoaded(id) {
					t.Errorf("device program %d attached to %s but not found by id", id, dir)
				}
			}
			// From outside the group every node opens (or fails in the
			// driver): the program binds the group only.
			if _, err := os.OpenFile(nv0, os.O_RDWR, 0); !errors.Is(err, unix.ENXIO) {
				t.Errorf("outside the group, %s: %v, want ENXIO", nv0, err)
			}
			var paths []string
			for p := range c.want {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			got := openFromInside(t, g, paths...)
			for _, p := range paths {
				if got[p] != c.want[p] {
					t.Errorf("inside %s, open %s: %s, want %s", dir, p, got[p], c.want[p])
				}
			}
			if _, err := g.Kill(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			if err := g.Remove(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s left: %v", dir, err)
			}
			// The cgroup held the program; its release (asynchronous,
			// after the rmdir) frees it.
			for _, id := range progs {
				deadline := time.Now().Add(30 * time.Second)
				for programLoaded(id) && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				if programLoaded(id) {
					t.Errorf("device program %d still loaded 30 s after its group was removed", id)
				}
			}
		})
	}
}

// TestDeviceProgramStacks: a program attached above the group (as systemd
// attaches DeviceAllow=, BPF_F_ALLOW_MULTI) still binds the group's
// processes, whatever the group's own program allows; and a group made
// again in the same directory holds one program, not two.
func TestDeviceProgramStacks(t *testing.T) {
	hs := v2Only(t)
	nv0, _ := gpuNodes(t)
	parent := filepath.Join(hs[0].GroupRoot(), "gym_otel_test", "dev", "stack")
	if err := makeDir(hs[0], parent); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Remove(parent) }()
	// Above: everything but /dev/zero (1:5).
	if err := attachDeviceProgram(parent, []string{"c 1:3 rwm", "c 195:* rwm"}); err != nil {
		t.Fatal(err)
	}
	rel := filepath.Join("gym_otel_test", "dev", "stack", "job")
	g, err := Create(hs, rel, Limits{MemoryBytes: 64 << 20, Devices: append(slices.Clone(DeviceAllow), "c 195:0 rw")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = g.Kill(5 * time.Second); _ = g.Remove() }()
	if err := attachDeviceProgram(g.Dirs()[0], append(slices.Clone(DeviceAllow), "c 195:0 rw")); err != nil {
		t.Fatal(err)
	}
	if ids := attachedDevicePrograms(t, g.Dirs()[0]); len(ids) != 1 {
		t.Errorf("attached twice: programs %v on the group, want 1", ids)
	}
	got := openFromInside(t, g, "/dev/null", "/dev/zero", nv0)
	want := map[string]string{"/dev/null": "ok", "/dev/zero": "EPERM", nv0: "ENXIO"}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("open %s under a parent's program: %s, want %s", p, got[p], w)
		}
	}
}

// attachedDevicePrograms are the ids of the device programs attached to
// the cgroup directory dir itself (BPF_PROG_QUERY).
func attachedDevicePrograms(t testing.TB, dir string) []uint32 {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	n, err := deviceProgramIDs(fd)
	if err != nil {
		t.Fatalf("BPF_PROG_QUERY %s: %v", dir, err)
	}
	return n
}

// BenchmarkDeviceGroup is what a job's v2 group with its device program
// costs the prolog and epilog: create the group (directory, bounds, the
// program loaded and attached), then remove it; "create-remove" with the
// program, "no-program" the same without it (attach skipped), both on the
// node's unified hierarchy. It prints the median of its runs (b.N, at
// least 50 with -benchtime=50x) beside the mean.
func BenchmarkDeviceGroup(b *testing.B) {
	hs := v2Only(b)
	for _, withProg := range []bool{true, false} {
		name := "create-remove"
		if !withProg {
			name = "no-program"
		}
		b.Run(name, func(b *testing.B) {
			skipDevicePrograms = !withProg
			defer func() { skipDevicePrograms = false }()
			ds := make([]time.Duration, 0, b.N)
			for i := 0; i < b.N; i++ {
				rel := filepath.Join("gym_otel_test", "dev", fmt.Sprintf("bench_%d", i))
				start := time.Now()
				g, err := Create(hs, rel, Limits{MemoryBytes: 64 << 20})
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Remove(); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "median-µs")
		})
	}
}

// programLoaded reports whether the kernel still holds the BPF program id
// (BPF_PROG_GET_FD_BY_ID: ENOENT once it is freed).
func programLoaded(id uint32) bool {
	attr := struct {
		id, next, flags uint32
	}{id: id}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_GET_FD_BY_ID, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno == 0 {
		unix.Close(int(fd))
		return true
	}
	return errno != unix.ENOENT
}
