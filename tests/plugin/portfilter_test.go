package plugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// TestPortFilterOtherUsers plays another local user (nobody) against a
// running job's loopback ports, with the node's packet filter the prolog
// installs (port_filter=auto on a node with nft and a cgroup v2 group):
//   - every port of the job (the OTLP receivers, the health check, the
//     collector's own metrics, the supervisor's final-figures and cgroup
//     pages) refuses the other user's connections, 200 of them in a row
//     included, while the job's own export through its receiver succeeds;
//   - the collector is killed mid-job (its supervisor held stopped so that
//     the other user surely binds the freed ports first): the batch script,
//     which already holds the endpoint and the receiver token, sends again,
//     and the other user's listener receives nothing of it;
//   - after the job the node's table holds nothing of the job.
func TestPortFilterOtherUsers(t *testing.T) {
	waitIdle(t)
	if portfilter.Nft() == "" {
		t.Fatal("no nft on this node: .ci/install-deps.sh installs nftables")
	}
	d := markerDir(t, "portfilter")
	squat := buildSquat(t, d)
	post := `curl -s -m 5 -o /dev/null -w '%{http_code}' -XPOST -H "Authorization: $auth" -H 'Content-Type: application/json' --data '{"resourceSpans":[]}' "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces"`
	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
env | grep -E '^(OTEL_|NEMO_GYM_OTEL_|SLURM_JOB_ID=)' > %[1]s/job.env
auth=${OTEL_EXPORTER_OTLP_HEADERS#Authorization=}; auth=${auth//%%20/ }
touch %[1]s/ready
for i in $(seq 1 900); do [ -e %[1]s/go1 ] && break; sleep 0.1; done
%[2]s > %[1]s/post1.code
touch %[1]s/posted1
for i in $(seq 1 900); do [ -e %[1]s/go2 ] && break; sleep 0.1; done
%[2]s > %[1]s/post2.code
touch %[1]s/posted2
true
`, d, post))
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, 240*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 --wait --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	}()
	waitFile(t, 60*time.Second, d+"/ready")
	stateFile := filepath.Join(d, "run", "otel", "state.json")
	var st jobdir.State
	if b, err := os.ReadFile(stateFile); err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("state.json: %v %s", err, b)
	}
	ports := st.Ports.Loopback()
	if len(ports) < 4 {
		t.Fatalf("state.json ports: %+v", st.Ports)
	}
	checkPortPlace(t, ports)
	jobID := envJobID(t, d+"/job.env")
	list, err := exec.Command(portfilter.Nft(), "list", "map", "inet", portfilter.Table, "in_ports").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s (slurmd's log: %s)", err, list, lastLines(slurmdLogs(t), "port", 5))
	}
	for _, p := range ports {
		if !strings.Contains(string(list), fmt.Sprintf("%d : jump %s", p, portfilter.Job{ID: uint32(atoiOr0(jobID)), Cluster: clusterName(), Node: "gn1"}.Chain("in"))) {
			t.Errorf("the node's filter lacks port %d of job %s:\n%s", p, jobID, list)
		}
	}

	// The other user against every port, then 200 connections in a row.
	for _, p := range ports {
		out, _ := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			"curl", "-s", "-m", "3", "-o", "/dev/null", "-w", "%{http_code}", fmt.Sprintf("http://127.0.0.1:%d/", p)).Output()
		if string(out) != "000" {
			t.Errorf("another user reached port %d of the job: HTTP %q", p, out)
		}
	}
	flood := fmt.Sprintf(`n=0; for i in $(seq 1 200); do if exec 3<>/dev/tcp/127.0.0.1/%d; then n=$((n+1)); exec 3>&-; fi 2>/dev/null; done; echo $n`, st.Ports.OTLPGRPC)
	out, _ := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", flood).Output()
	if strings.TrimSpace(string(out)) != "0" {
		t.Errorf("another user opened %s of 200 connections to the job's OTLP gRPC port", strings.TrimSpace(string(out)))
	}
	if err := os.WriteFile(d+"/go1", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, 30*time.Second, d+"/posted1")
	if code, _ := os.ReadFile(d + "/post1.code"); string(code) != "200" {
		t.Errorf("the job's own export to its receiver: HTTP %q, want 200", code)
	}

	// The collector killed, its ports bound by the other user first.
	logf, resume := squatAfterKill(t, d, squat, st.SupervisorPID, st.CollectorPID, []int{st.Ports.OTLPGRPC, st.Ports.OTLPHTTP, st.Ports.Health, st.Ports.Telemetry})
	if err := os.WriteFile(d+"/go2", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFile(t, 30*time.Second, d+"/posted2")
	if code, _ := os.ReadFile(d + "/post2.code"); string(code) != "000" {
		t.Errorf("the batch script's send after the squat: HTTP %q, want no connection (000)", code)
	}
	resume()
	r := <-done
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("the job failed (exit %d): %s\n%s", r.code, r.stderr, out)
	}
	got, _ := os.ReadFile(logf)
	if len(got) != 0 {
		t.Errorf("the other user's listener on the job's ports received %d bytes:\n%.2000s", len(got), got)
	}
	waitNoCollector(t)
	waitIdle(t)
	list, _ = exec.Command(portfilter.Nft(), "list", "table", "inet", portfilter.Table).CombinedOutput()
	if strings.Contains(string(list), "job_"+jobID+"_") {
		t.Errorf("the job's rules are left after its epilog:\n%s", list)
	}
}

// envJobID is the job's SLURM_JOB_ID, from the env file its script wrote.
func envJobID(t *testing.T, envFile string) string {
	t.Helper()
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SLURM_JOB_ID="); ok {
			return v
		}
	}
	t.Fatalf("no SLURM_JOB_ID in the job's env:\n%s", b)
	return ""
}

// lastLines is the last n lines of text that contain pat.
func lastLines(text, pat string, n int) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, pat) {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

// TestPortFilterOrphansSwept: rules of a job that has no record on the
// node (an epilog whose removal failed, a record dir removed by hand) keep
// resetting connections to their ports after the job is gone, whoever
// listens there next: an srun's own port for its step's launch answer
// among them, which then waits for ever ("_send_launch_resp: Failed to
// send RESPONSE_LAUNCH_TASKS: Connection refused"). The next prolog on the
// node removes them, and a listener on such a port is reached again. The
// rules of a job of the same id on a node of the same name of another
// cluster on this host (the chains are named by cluster) are not this
// cluster's to sweep, even with no listener on their port: they survive.
func TestPortFilterOrphansSwept(t *testing.T) {
	waitIdle(t)
	nft := portfilter.Nft()
	if nft == "" {
		t.Fatal("no nft on this node: .ci/install-deps.sh installs nftables")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	freePort := func() int {
		free, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer free.Close()
		return free.Addr().(*net.TCPAddr).Port
	}
	// A second port of the gone job's that nobody listens on now.
	port2 := freePort()
	// Another cluster's job of the same id on its node gn1, on a port
	// nobody listens on either.
	port3 := freePort()
	orphan := portfilter.Job{ID: 4000000001, Cluster: clusterName(), Node: "gn1"}
	theirs := portfilter.Job{ID: orphan.ID, Cluster: clusterName() + "-other", Node: "gn1"}
	in, out := orphan.Chain("in"), orphan.Chain("out")
	tin, tout := theirs.Chain("in"), theirs.Chain("out")
	plant := fmt.Sprintf(`add table inet %[1]s
add map inet %[1]s out_ports { type inet_service : verdict; }
add map inet %[1]s in_ports { type inet_service : verdict; }
add chain inet %[1]s output { type filter hook output priority -10; policy accept; }
add chain inet %[1]s input { type filter hook input priority -10; policy accept; }
add chain inet %[1]s %[2]s
add rule inet %[1]s %[2]s reject with tcp reset
add chain inet %[1]s %[3]s
add rule inet %[1]s %[3]s reject with tcp reset
add chain inet %[1]s %[6]s
add rule inet %[1]s %[6]s reject with tcp reset
add chain inet %[1]s %[7]s
add rule inet %[1]s %[7]s reject with tcp reset
flush chain inet %[1]s output
flush chain inet %[1]s input
add rule inet %[1]s output ip daddr 127.0.0.1 tcp dport vmap @out_ports
add rule inet %[1]s input ip daddr 127.0.0.1 tcp flags & (syn | ack) == syn tcp dport vmap @in_ports
add element inet %[1]s in_ports { %[4]d : jump %[2]s, %[5]d : jump %[2]s, %[8]d : jump %[6]s }
add element inet %[1]s out_ports { %[4]d : jump %[3]s, %[5]d : jump %[3]s, %[8]d : jump %[7]s }
`, portfilter.Table, in, out, port, port2, tin, tout, port3)
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader(plant)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("planting the orphaned rules: %v: %s", err, b)
	}
	t.Cleanup(func() {
		run := portfilter.NftRunner(nft)
		_ = portfilter.Remove(context.Background(), run, portfilter.Job{ID: orphan.ID, Cluster: orphan.Cluster, Node: orphan.Node, Ports: []int{port, port2}})
		_ = portfilter.Remove(context.Background(), run, portfilter.Job{ID: theirs.ID, Cluster: theirs.Cluster, Node: theirs.Node, Ports: []int{port3}})
	})
	// The base chains' rules as the plugin's prolog writes them: the
	// planted entry resets a connection to the port, whoever listens.
	reach := func() error {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := reach(); err == nil {
		t.Fatal("the planted orphaned rules let a connection to their port through")
	}
	r := asUser(t, 120*time.Second, tokenEnv(), "sbatch -N1 -w gn1 --wait --gym-otel -o /dev/null --wrap true")
	if r.code != 0 {
		t.Fatalf("the job failed (exit %d): %s", r.code, r.stderr)
	}
	waitNoCollector(t)
	list, _ := exec.Command(nft, "list", "table", "inet", portfilter.Table).CombinedOutput()
	if strings.Contains(string(list), in) || strings.Contains(string(list), out) {
		t.Errorf("the orphaned rules outlived the next prolog on gn1:\n%s", list)
	}
	for _, c := range []string{tin, tout, fmt.Sprintf("%d : jump %s", port3, tin)} {
		if !strings.Contains(string(list), c) {
			t.Errorf("the next prolog on gn1 swept the other cluster's rules of a job of the same id (%s gone):\n%s", c, list)
		}
	}
	if err := reach(); err != nil {
		t.Errorf("a listener on the orphaned rules' port after the sweep: %v", err)
	}
	// The ports as nft lists the map's elements: in order.
	lo, hi := min(port, port2), max(port, port2)
	if !strings.Contains(slurmdLogs(t), fmt.Sprintf("job %d: removed its orphaned packet filter rules (ports [%d %d]", orphan.ID, lo, hi)) {
		t.Errorf("no line of the sweep in slurmd's log:\n%s", lastLines(slurmdLogs(t), "orphaned", 5))
	}
	waitIdle(t)
}

// checkPortPlace checks where root chose the job's ports: above the
// kernel's ephemeral range, where no process is handed a port it did not
// name (so a rule the job leaves behind never resets an srun's or any
// other kernel-chosen port), and outside the cluster's SrunPortRange
// (tests/slurm/up.sh sets 61000-62999, inside that span).
func checkPortPlace(t *testing.T, ports []int) {
	t.Helper()
	eph, srun := portRanges(t)
	for _, p := range ports {
		if p <= eph.High || srun.Has(p) {
			t.Errorf("job port %d: want above the ephemeral range %d-%d and outside SrunPortRange %d-%d", p, eph.Low, eph.High, srun.Low, srun.High)
		}
	}
}

// portRanges are this host's ephemeral range (ip_local_port_range) and
// the test cluster's SrunPortRange.
func portRanges(t *testing.T) (eph, srun launch.PortRange) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	eph, err = launch.ParsePortRange(string(b))
	if err != nil {
		t.Fatal(err)
	}
	conf, err := slurm.ReadConf(slurmEnv["SLURM_CONF"])
	if err != nil {
		t.Fatalf("the cluster's slurm.conf: %v", err)
	}
	v, _ := conf.Get("SrunPortRange")
	srun, err = launch.ParsePortRange(v)
	if err != nil {
		t.Fatalf("the cluster's SrunPortRange: %v", err)
	}
	return eph, srun
}

// TestPortSpanTakenByAnotherUser: another local user (nobody) binds every
// port it can above the kernel's ephemeral range, where the prolog
// chooses the jobs' ports (SrunPortRange left to the sruns), before a job
// starts. The job still gets its collector, on ports that user does not
// hold: the kernel's choice in its own range once no port above it is
// free; the job's export through its receiver succeeds.
func TestPortSpanTakenByAnotherUser(t *testing.T) {
	waitIdle(t)
	d := markerDir(t, "portspan")
	eph, srun := portRanges(t)
	holder := `
import os, resource, socket, sys, time
lo, hi, slo, shi = map(int, sys.argv[1:5])
d = sys.argv[5]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
socks, held = [], []
for p in range(lo, hi + 1):
    if slo <= p <= shi:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        s.listen(1)
    except OSError:
        s.close()
        continue
    socks.append(s)
    held.append(p)
with open(d + "/held", "w") as f:
    f.write("\n".join(map(str, held)))
open(d + "/held.ready", "w").close()
while not os.path.exists(d + "/held.stop"):
    time.sleep(0.2)
`
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", holder, // Debian's (.ci/install-deps.sh): a python3 first in root's PATH may be one nobody cannot run
		strconv.Itoa(eph.High+1), "65535", strconv.Itoa(srun.Low), strconv.Itoa(srun.High), d)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var holderErr strings.Builder
	cmd.Stderr = &holderErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = os.WriteFile(d+"/held.stop", nil, 0o644)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(d + "/held.ready"); err == nil {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("nobody's port holder ended before it held its ports: %v: %s", err, holderErr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nobody's port holder held no ports within 60 s: %s", holderErr.String())
		}
	}
	heldText, _ := os.ReadFile(d + "/held")
	held := map[int]bool{}
	for _, l := range strings.Fields(string(heldText)) {
		n, _ := strconv.Atoi(l)
		held[n] = true
	}
	span := 65535 - eph.High - (srun.High - srun.Low + 1)
	t.Logf("nobody holds %d of the %d ports above %d outside SrunPortRange", len(held), span, eph.High)
	if len(held) < span-200 {
		t.Fatalf("nobody holds only %d of %d ports (%s)", len(held), span, holderErr.String())
	}

	script := writeScript(t, filepath.Base(d)+".sh", fmt.Sprintf(`
auth=${OTEL_EXPORTER_OTLP_HEADERS#Authorization=}; auth=${auth//%%20/ }
curl -s -m 5 -o /dev/null -w '%%{http_code}' -XPOST -H "Authorization: $auth" -H 'Content-Type: application/json' --data '{"resourceSpans":[]}' "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces" > %[1]s/post.code
`, d))
	r := asUser(t, 120*time.Second, tokenEnv(), fmt.Sprintf("sbatch -N1 --wait --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, script))
	if r.code != 0 {
		out, _ := os.ReadFile(d + "/job.out")
		t.Fatalf("the job failed (exit %d): %s\n%s\n%s", r.code, r.stderr, out, lastLines(slurmdLogs(t), "gym-otel", 10))
	}
	if code, _ := os.ReadFile(d + "/post.code"); string(code) != "200" {
		t.Errorf("the job's export to its receiver: HTTP %q, want 200", code)
	}
	var st jobdir.State
	if b, err := os.ReadFile(filepath.Join(d, "run", "otel", "state.json")); err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("state.json: %v %s", err, b)
	}
	for _, p := range st.Ports.Loopback() {
		if held[p] {
			t.Errorf("job port %d is one nobody held", p)
		}
		if p > eph.High && !held[p] {
			t.Logf("job port %d above the ephemeral range (one nobody could not bind)", p)
		}
	}
	t.Logf("the job's ports with the span taken: %v", st.Ports.Loopback())
}
