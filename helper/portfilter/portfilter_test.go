package portfilter_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/cgroup"
	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// The test binary plays the processes of the kernel test: a listener
// (GOS_PF_ROLE=listen) and a client (GOS_PF_ROLE=dial), each started with
// the credentials and in the cgroup the test gives it.
func TestMain(m *testing.M) {
	switch os.Getenv("GOS_PF_ROLE") {
	case "listen":
		listen(os.Getenv("GOS_PF_PORT"))
		return
	case "dial":
		dial(os.Getenv("GOS_PF_PORT"))
		return
	}
	os.Exit(m.Run())
}

// listen listens on 127.0.0.1:port, says "listening", then prints each
// line a connection sends ("got <line>") until killed.
func listen(port string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("listening")
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			fmt.Println("got", strings.TrimSpace(line))
			c.Write([]byte("ok\n"))
		}()
	}
}

// dial connects to 127.0.0.1:port, sends a secret line and prints
// "answered" when the listener answered, else "refused" or the error.
func dial(port string) {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 2*time.Second)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			fmt.Println("refused")
		} else {
			fmt.Println("error", err)
		}
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("the-job-token\n")); err != nil {
		fmt.Println("error", err)
		return
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err == nil && line == "ok\n" {
		fmt.Println("answered")
		return
	} else if errors.Is(err, syscall.ECONNRESET) {
		fmt.Println("refused")
		return
	} else {
		fmt.Println("error", err)
	}
}

func TestAddScript(t *testing.T) {
	j := portfilter.Job{ID: 42, Cluster: "c1", Node: "gn1", UID: 2001, Ports: []int{40001, 40002}, Group: "unified/gym_otel/c/n1/job_42", Level: 4}
	s, err := portfilter.AddScript(j)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"add table inet gym_otel\n",
		"add rule inet gym_otel output ip daddr 127.0.0.1 tcp dport vmap @out_ports\n",
		"add rule inet gym_otel input ip daddr 127.0.0.1 tcp flags & (syn | ack) == syn tcp dport vmap @in_ports\n",
		"add rule inet gym_otel job_42_c1_gn1_a160ece7_out meta skuid { 0, 2001 } return\n",
		"add rule inet gym_otel job_42_c1_gn1_a160ece7_in socket cgroupv2 level 4 \"unified/gym_otel/c/n1/job_42\" return\n",
		"add element inet gym_otel out_ports { 40001 : jump job_42_c1_gn1_a160ece7_out, 40002 : jump job_42_c1_gn1_a160ece7_out }\n",
		"add element inet gym_otel in_ports { 40001 : jump job_42_c1_gn1_a160ece7_in, 40002 : jump job_42_c1_gn1_a160ece7_in }\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q:\n%s", want, s)
		}
	}
	other := j
	other.Node, other.Group = "gn2", "unified/gym_otel/c/n2/job_42"
	s2, err := portfilter.AddScript(other)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s2, "job_42_c1_gn1_") || !strings.Contains(s2, "job_42_c1_gn2_") {
		t.Errorf("a second node of the job on the host shares the first one's chains:\n%s", s2)
	}
	odd := j
	odd.Node = "gpu-a100.rack 7/x"
	if s3, err := portfilter.AddScript(odd); err != nil || !strings.Contains(s3, "add chain inet gym_otel job_42_c1_gpu_a100_rack_7_x_") {
		t.Errorf("a node name with other characters: %v\n%s", err, s3)
	}
	// The same job id and node of another cluster on the host (one host
	// may run nodes of several clusters under the same name): its own
	// chains.
	c2 := j
	c2.Cluster = "c2"
	if s4, err := portfilter.AddScript(c2); err != nil || strings.Contains(s4, "job_42_c1_") || !strings.Contains(s4, "add chain inet gym_otel job_42_c2_gn1_") {
		t.Errorf("another cluster's job of the same id on a node of the same name: %v\n%s", err, s4)
	}
	for _, bad := range []portfilter.Job{
		{ID: 1, UID: 1, Group: "g", Level: 1},
		{ID: 1, UID: 1, Ports: []int{0}, Group: "g", Level: 1},
		{ID: 1, UID: 1, Ports: []int{70000}, Group: "g", Level: 1},
		{ID: 1, UID: 1, Ports: []int{1}, Group: "", Level: 1},
		{ID: 1, UID: 1, Ports: []int{1}, Group: "a\" accept; #", Level: 1},
		{ID: 1, UID: 1, Ports: []int{1}, Group: "a b", Level: 1},
		{ID: 1, UID: 1, Ports: []int{1}, Group: "g", Level: 0},
	} {
		if _, err := portfilter.AddScript(bad); err == nil {
			t.Errorf("AddScript(%+v): no error", bad)
		}
	}
}

// TestInstallOrder: a job's install into the node's table as it is runs
// the job's part alone (no base chain set again, which makes the kernel's
// commit wait); where that fails (no table) the table's part goes first,
// in the same transaction; a stale port of the job is removed and the
// whole install tried once more. EnsureTable sets the base chains' rules
// again and touches no job's.
func TestInstallOrder(t *testing.T) {
	j := portfilter.Job{ID: 42, Cluster: "c1", Node: "gn1", UID: 2001, Ports: []int{40001}, Group: "unified/gym_otel/c/n1/job_42", Level: 4}
	for _, c := range []struct {
		name  string
		fails int // runs that fail first
		want  []string
	}{
		{"table there", 0, []string{"job"}},
		{"no table", 1, []string{"job", "table+job"}},
		{"a stale port", 2, []string{"job", "table+job", "delete", "delete", "table+job"}},
	} {
		var runs []string
		run := func(_ context.Context, script string) error {
			kind := "job"
			switch {
			case strings.HasPrefix(script, "delete element"):
				kind = "delete"
			case strings.Contains(script, "add table"):
				kind = "table+job"
				if !strings.Contains(script, "add chain inet gym_otel job_42_") {
					kind = "table"
				}
			case strings.Contains(script, "flush chain inet gym_otel output") || strings.Contains(script, "flush chain inet gym_otel input"):
				kind = "job with the base chains flushed"
			}
			runs = append(runs, kind)
			if len(runs) <= c.fails && kind != "delete" {
				return fmt.Errorf("nft: exit status 1: No such file or directory")
			}
			return nil
		}
		if err := portfilter.Install(context.Background(), run, j); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if strings.Join(runs, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: runs %v, want %v", c.name, runs, c.want)
		}
	}
	var got string
	if err := portfilter.EnsureTable(context.Background(), func(_ context.Context, script string) error { got = script; return nil }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "flush chain inet gym_otel output\n") || !strings.Contains(got, "add rule inet gym_otel output ip daddr 127.0.0.1 tcp dport vmap @out_ports\n") || strings.Contains(got, "job_") {
		t.Errorf("EnsureTable's script:\n%s", got)
	}
}

func TestGroupName(t *testing.T) {
	for _, c := range []struct {
		dir, mount, name string
		level            int
	}{
		{"/sys/fs/cgroup/unified/gym_otel/c/n/job_1", "/sys/fs/cgroup/unified", "unified/gym_otel/c/n/job_1", 4},
		{"/sys/fs/cgroup/system.slice/slurmstepd.scope/gym_otel/n/job_1", "/sys/fs/cgroup", "system.slice/slurmstepd.scope/gym_otel/n/job_1", 5},
	} {
		name, level, err := portfilter.GroupName(c.dir, c.mount)
		if err != nil || name != c.name || level != c.level {
			t.Errorf("GroupName(%s, %s) = %q, %d, %v; want %q, %d", c.dir, c.mount, name, level, err, c.name, c.level)
		}
	}
	for _, c := range [][2]string{
		{"/mnt/cg2/gym_otel/job_1", "/mnt/cg2"},
		{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/unified"},
		{"/sys/fs/cgroup/memory/x", "/sys/fs/cgroup/unified"},
	} {
		if _, _, err := portfilter.GroupName(c[0], c[1]); err == nil {
			t.Errorf("GroupName(%s, %s): no error", c[0], c[1])
		}
	}
}

func TestParseMode(t *testing.T) {
	for _, m := range []string{"auto", "require", "off"} {
		if got, err := portfilter.ParseMode(m); err != nil || got != m {
			t.Errorf("ParseMode(%s) = %q, %v", m, got, err)
		}
	}
	if _, err := portfilter.ParseMode("on"); err == nil || !strings.Contains(err.Error(), `"on"`) {
		t.Errorf("ParseMode(on): %v", err)
	}
}

// v2Mount is the node's cgroup v2 mount below /sys/fs/cgroup, "" when none.
func v2Mount(t *testing.T) string {
	hs, err := cgroup.Discover("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Version == cgroup.V2 && !h.ReadOnly && (h.Mount == portfilter.CgroupMount || strings.HasPrefix(h.Mount, portfilter.CgroupMount+"/")) {
			return h.Mount
		}
	}
	return ""
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// self is a copy of the test binary that every uid can run (copySelf).
var self string

// copySelf copies the test binary into a directory every uid can enter.
func copySelf(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	self = filepath.Join(dir, "portfilter.test")
	if err := os.WriteFile(self, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// role starts the test binary in a role, as uid, in the cgroup v2 group
// whose directory cgfd holds (-1: this process's group).
func role(t *testing.T, name string, port int, uid uint32, cgfd int) *exec.Cmd {
	cmd := exec.Command(self)
	cmd.Env = []string{"GOS_PF_ROLE=" + name, "GOS_PF_PORT=" + strconv.Itoa(port)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if cgfd >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cgfd
	}
	return cmd
}

// listener starts a listener and waits for it to listen; its output
// (what it got) is read after it is killed.
func listener(t *testing.T, port int, uid uint32, cgfd int) func() string {
	cmd := role(t, "listen", port, uid, cgfd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	if line, _ := r.ReadString('\n'); line != "listening\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("listener on %d as uid %d: %q", port, uid, line)
	}
	var rest strings.Builder
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			rest.Write(b[:n])
			if err != nil {
				return
			}
		}
	}()
	stopped := false
	stop := func() string {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			cmd.Wait()
			<-done
		}
		return rest.String()
	}
	t.Cleanup(func() { stop() })
	return stop
}

func dialAs(t *testing.T, port int, uid uint32) string {
	out, err := role(t, "dial", port, uid, -1).Output()
	if err != nil {
		t.Fatalf("dial %d as uid %d: %v", port, uid, err)
	}
	return strings.TrimSpace(string(out))
}

// TestFilterKernel installs a job's rules on this node's kernel, once with
// the nft program (Install) and once through netlink as the job prolog
// does (SetTable, AddJob), and plays the job's collector (a listener of
// the job's uid inside the job's cgroup v2 group), the job's tasks (the
// job's uid outside it), another user, and squatters of both uids on a
// port of the job that its collector freed. The nft program removes
// either's rules (Remove).
func TestFilterKernel(t *testing.T) {
	for _, way := range []string{"nft", "netlink"} {
		t.Run(way, func(t *testing.T) { filterKernel(t, way) })
	}
}

func filterKernel(t *testing.T, way string) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (the kernel's packet filter)")
		return
	}
	nft := portfilter.Nft()
	if nft == "" {
		testenv.Missing(t, "nft (Debian's nftables)")
		return
	}
	mount := v2Mount(t)
	if mount == "" {
		testenv.Missing(t, "a writable cgroup v2 hierarchy below /sys/fs/cgroup")
		return
	}
	copySelf(t)
	dir := filepath.Join(mount, fmt.Sprintf("gym_otel_pftest_%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	name, level, err := portfilter.GroupName(dir, mount)
	if err != nil {
		t.Fatal(err)
	}
	const jobUID, otherUID = 65534, 65533
	held, freed := freePort(t), freePort(t)
	stopCollector := listener(t, held, jobUID, int(cg.Fd()))

	run := portfilter.NftRunner(nft)
	ctx := context.Background()
	j := portfilter.Job{ID: 4000000000 - uint32(os.Getpid()%1000), Cluster: "pftest", Node: "pftest", UID: jobUID, Ports: []int{held, freed}, Group: name, Level: level}
	start := time.Now()
	if way == "netlink" {
		if err := portfilter.SetTable(); err != nil {
			t.Fatal(err)
		}
		t.Logf("table: %v", time.Since(start))
		start = time.Now()
		if err := portfilter.AddJob(j); err != nil {
			t.Fatal(err)
		}
	} else if err := portfilter.Install(ctx, run, j); err != nil {
		t.Fatal(err)
	}
	t.Logf("install: %v", time.Since(start))
	listing, err := exec.Command(nft, "list", "table", "inet", portfilter.Table).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, listing)
	}
	t.Logf("%s", listing)
	// The sweep's listing through netlink (no nft program named) reads
	// the job's chains and ports, however they were made; live, it is no
	// orphan.
	start = time.Now()
	orphans, err := portfilter.Orphans(ctx, "", j.Cluster, j.Node, func(uint32) bool { return false })
	t.Logf("orphans through netlink: %v", time.Since(start))
	if err != nil || len(orphans) != 1 || orphans[0].ID != j.ID || !slices.Equal(sorted(orphans[0].Ports), sorted(j.Ports)) {
		t.Errorf("Orphans through netlink = %+v, %v; want job %d with ports %v", orphans, err, j.ID, j.Ports)
	}
	if orphans, err := portfilter.Orphans(ctx, "", j.Cluster, j.Node, func(id uint32) bool { return id == j.ID }); err != nil || len(orphans) != 0 {
		t.Errorf("Orphans with the job live = %+v, %v; want none", orphans, err)
	}
	if way == "netlink" {
		// The table's ports, as the prolog reads them to choose among
		// the others.
		start := time.Now()
		heldPorts, err := portfilter.HeldPorts()
		t.Logf("held ports: %v", time.Since(start))
		if err != nil || !heldPorts[held] || !heldPorts[freed] {
			t.Errorf("HeldPorts = %v, %v; want %d and %d among them", heldPorts, err, held, freed)
		}
		// A port still in the maps (another job's, live or stale) fails
		// the whole transaction with ErrPortHeld: nothing of it is left,
		// and the prolog chooses other ports.
		stale := j
		stale.ID++
		stale.Ports = []int{freed}
		if err := portfilter.AddJob(stale); !errors.Is(err, portfilter.ErrPortHeld) {
			t.Errorf("AddJob over a port of another job's: %v, want ErrPortHeld", err)
		}
		out, err := exec.Command(nft, "list", "table", "inet", portfilter.Table).CombinedOutput()
		if err != nil {
			t.Fatalf("nft list: %v: %s", err, out)
		}
		if strings.Contains(string(out), fmt.Sprintf("job_%d_", stale.ID)) {
			t.Errorf("a failed AddJob left its chains:\n%s", out)
		}
	}
	// Each way's rules are removed by the other's: an epilog through
	// netlink removes a job's rules that nft made (a prolog before the
	// upgrade), and nft (the sweep's fallback) the rules netlink made.
	remove := func() error {
		if way == "netlink" {
			return portfilter.Remove(ctx, run, j)
		}
		return portfilter.RemoveJob(j)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			remove()
		}
	})
	if err := portfilter.Probe(held, time.Second); err != nil {
		t.Fatalf("root's probe: %v", err)
	}

	// Sending half: the job's uid and root reach the collector, another
	// uid is reset.
	if got := dialAs(t, held, jobUID); got != "answered" {
		t.Errorf("the job's task to its collector: %s", got)
	}
	if got := dialAs(t, held, 0); got != "answered" {
		t.Errorf("root to the job's collector: %s", got)
	}
	if got := dialAs(t, held, otherUID); got != "refused" {
		t.Errorf("another user to the job's collector: %s, want refused", got)
	}
	if got := stopCollector(); strings.Count(got, "got the-job-token") != 2 {
		t.Errorf("the collector got %q, want the two lines of the job's uid and root", got)
	}

	// Receiving half: a port of the job that its collector freed, bound by
	// another user, then by the job's own uid outside the group: the job's
	// tasks are reset, the squatter accepts nothing.
	for _, squatter := range []uint32{otherUID, jobUID} {
		stop := listener(t, freed, squatter, -1)
		if got := dialAs(t, freed, jobUID); got != "refused" {
			t.Errorf("the job's task to a squatter (uid %d) of its port: %s, want refused", squatter, got)
		}
		if got := stop(); got != "" {
			t.Errorf("the squatter (uid %d) got %q", squatter, got)
		}
	}

	// Removed, the same squatter gets the connection: the rules were what
	// stopped it.
	start = time.Now()
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	removed = true
	t.Logf("remove: %v", time.Since(start))
	out, err := exec.Command(nft, "list", "table", "inet", portfilter.Table).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, out)
	}
	if strings.Contains(string(out), fmt.Sprintf("job_%d_", j.ID)) || strings.Contains(string(out), strconv.Itoa(freed)+" :") {
		t.Errorf("the job's rules are left after Remove:\n%s", out)
	}
	stop := listener(t, freed, otherUID, -1)
	if got := dialAs(t, freed, jobUID); got != "answered" {
		t.Errorf("without the rules, the squatter's port: %s (want answered: the test would not show the filter)", got)
	}
	stop()
	// A second removal, either way, finds nothing and is no error.
	if err := portfilter.Remove(ctx, run, j); err != nil {
		t.Errorf("a second Remove: %v", err)
	}
	if err := portfilter.RemoveJob(j); err != nil {
		t.Errorf("a second RemoveJob: %v", err)
	}
}

// sorted is a sorted copy of ports.
func sorted(ports []int) []int {
	out := slices.Clone(ports)
	slices.Sort(out)
	return out
}
