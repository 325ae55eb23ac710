//go:build vmguest

package guest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/portfilter"
)

// other is the second unprivileged user of the node: nobody, not the
// job's user.
const other = "65534"

// asOther runs argv as the other user (setpriv: no groups).
func asOther(argv ...string) *exec.Cmd {
	return exec.Command("setpriv", append([]string{"--reuid=" + other, "--regid=" + other, "--clear-groups"}, argv...)...)
}

// TestPortFilterOtherUser: the node's packet filter on cgroup v2 under
// systemd, where the plugin's group lies in Slurm's delegated scope
// (system.slice/vm_slurmstepd.scope/gym_otel/...): the receiving half
// (an input-hook rule that lets only sockets made inside the job's group,
// `socket cgroupv2 level N "<path>"`, take packets on the job's ports) and
// the sending half (`meta skuid`). A second unprivileged user (nobody),
// against a running flagged job:
//   - the node's table maps every loopback port of the job to its chain,
//     and the chain matches the group's path at its level under systemd;
//   - the other user's connection to each port gets no answer, and none of
//     200 in a row to the OTLP gRPC port opens, while the job's own export
//     through its receiver is answered 200;
//   - the collector killed mid-job (its supervisor held stopped so that the
//     other user binds the freed ports first, with the squatter of the
//     host's tests, tests/plugin/testdata/squat.c): the batch script, which
//     holds the endpoint and the receiver token, sends again; it gets no
//     connection and the other user's listener receives nothing;
//   - after the job the table holds nothing of it.
func TestPortFilterOtherUser(t *testing.T) {
	waitIdle(t)
	if portfilter.Nft() == "" {
		t.Fatal("no nft on the guest")
	}
	squat := filepath.Join(payload, "bin", "squat")
	if _, err := os.Stat(squat); err != nil {
		t.Fatalf("the squatter: %v", err)
	}
	d := jobDir(t, "portfilter")
	post := `curl -s -m 5 -o /dev/null -w '%{http_code}' -XPOST -H "Authorization: $auth" -H 'Content-Type: application/json' --data '{"resourceSpans":[]}' "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces"`
	sh := script(t, filepath.Join(d, "job.sh"), fmt.Sprintf(`#!/bin/bash
auth=${OTEL_EXPORTER_OTLP_HEADERS#Authorization=}; auth=${auth//%%20/ }
touch %[1]s/ready
for i in $(seq 1 1800); do [ -e %[1]s/go1 ] && break; sleep 0.1; done
%[2]s > %[1]s/post1.code
touch %[1]s/posted1
for i in $(seq 1 1800); do [ -e %[1]s/go2 ] && break; sleep 0.1; done
%[2]s > %[1]s/post2.code
touch %[1]s/posted2
true
`, d, post))
	done := make(chan result, 1)
	go func() {
		done <- asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=200M --gym-otel=job_dir=%s/run -o %s/job.out %s", d, d, sh))
	}()
	if !waitFor(patience, func() bool { _, err := os.Stat(d + "/ready"); return err == nil }) {
		t.Fatalf("the batch script never started\nslurmd:\n%s", tail(slurmd(t), 40))
	}
	var st jobdir.State
	if b, err := os.ReadFile(filepath.Join(d, "run", "otel", "state.json")); err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("state.json: %v %s", err, b)
	}
	ports := st.Ports.Loopback()
	if len(ports) < 4 {
		t.Fatalf("state.json ports: %+v", st.Ports)
	}
	out, _ := run("squeue", "-h", "-o", "%i", "-u", jobUser)
	id := strings.TrimSpace(out)
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("the job's id: %q", out)
	}
	list, err := exec.Command(portfilter.Nft(), "list", "table", "inet", portfilter.Table).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table: %v: %s", err, list)
	}
	for _, p := range ports {
		if !regexp.MustCompile(fmt.Sprintf(`\b%d : jump job_%s_%s_%s_`, p, id, cluster, node)).Match(list) {
			t.Errorf("the node's filter lacks port %d of job %s", p, id)
		}
	}
	group := groupPath(t, id)
	level := strings.Count(group, "/") + 1
	// nft prints the group's path while it exists (else its id).
	if !regexp.MustCompile(fmt.Sprintf(`socket cgroupv2 level %d ("%s"|\d+) `, level, regexp.QuoteMeta(group))).Match(list) {
		t.Errorf("no socket cgroupv2 match of the group %s at level %d", group, level)
	}
	var chain []string
	for _, l := range strings.Split(string(list), "\n") {
		if strings.Contains(l, "job_"+id+"_") || strings.Contains(l, "cgroupv2") || strings.Contains(l, "skuid") || strings.Contains(l, "hook") {
			chain = append(chain, strings.TrimSpace(l))
		}
	}
	t.Logf("job %s, ports %v, group %s: the node's table while it runs:\n  %s", id, ports, group, strings.Join(chain, "\n  "))

	for _, p := range ports {
		o, _ := asOther("curl", "-s", "-m", "3", "-o", "/dev/null", "-w", "%{http_code}", fmt.Sprintf("http://127.0.0.1:%d/", p)).Output()
		if string(o) != "000" {
			t.Errorf("the other user reached port %d of the job: HTTP %q", p, o)
		}
	}
	flood := fmt.Sprintf(`n=0; for i in $(seq 1 200); do if exec 3<>/dev/tcp/127.0.0.1/%d; then n=$((n+1)); exec 3>&-; fi 2>/dev/null; done; echo $n`, st.Ports.OTLPGRPC)
	o, _ := asOther("bash", "-c", flood).Output()
	if strings.TrimSpace(string(o)) != "0" {
		t.Errorf("the other user opened %s of 200 connections to the job's OTLP gRPC port", strings.TrimSpace(string(o)))
	}
	touch := func(f string) {
		if err := os.WriteFile(filepath.Join(d, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitPosted := func(f string) string {
		if !waitFor(patience, func() bool { _, err := os.Stat(filepath.Join(d, f)); return err == nil }) {
			t.Fatalf("the batch script did not post (%s)", f)
		}
		b, _ := os.ReadFile(filepath.Join(d, strings.Replace(f, "posted", "post", 1)+".code"))
		return string(b)
	}
	touch("go1")
	if code := waitPosted("posted1"); code != "200" {
		t.Errorf("the job's own export to its receiver: HTTP %q, want 200", code)
	}

	// The collector killed, its ports bound by the other user first.
	if err := syscall.Kill(st.SupervisorPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(st.SupervisorPID, syscall.SIGCONT)
		}
	}
	defer resume()
	if err := syscall.Kill(st.CollectorPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sqDir := filepath.Join(d, "squat")
	if err := os.Mkdir(sqDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sqDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(sqDir, "squat.log")
	if err := os.WriteFile(logf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(logf, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	sqPorts := []int{st.Ports.OTLPGRPC, st.Ports.OTLPHTTP, st.Ports.Health, st.Ports.Telemetry}
	argv := []string{squat, logf, sqDir + "/squat.ready"}
	for _, p := range sqPorts {
		argv = append(argv, strconv.Itoa(p))
	}
	sq := asOther(argv...)
	if err := sq.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sq.Process.Kill(); _ = sq.Wait() }()
	// The squatter (nobody) retries each bind for 30 s and then makes its
	// ready file, in a dir of its own: the job's dir is the job user's.
	if !waitFor(time.Minute, func() bool { _, err := os.Stat(sqDir + "/squat.ready"); return err == nil }) {
		holders, _ := run("ss", "-ltnpH")
		t.Fatalf("the other user could not bind the freed ports %v; listeners:\n%s", sqPorts, holders)
	}
	holders, _ := run("ss", "-ltnpH")
	t.Logf("the collector %d killed, the supervisor %d stopped; the other user holds %v:\n%s", st.CollectorPID, st.SupervisorPID, sqPorts, holders)
	touch("go2")
	if code := waitPosted("posted2"); code != "000" {
		t.Errorf("the batch script's send after the squat: HTTP %q, want no connection (000)", code)
	}
	resume()
	r := <-done
	jo, _ := os.ReadFile(d + "/job.out")
	if r.code != 0 {
		t.Errorf("the job failed (exit %d): %s\n%s", r.code, r.stderr, jo)
	}
	_ = sq.Process.Kill()
	_ = sq.Wait()
	if got, _ := os.ReadFile(logf); len(got) != 0 {
		t.Errorf("the other user's listener on the job's ports received %d bytes:\n%.2000s", len(got), got)
	}
	waitNoCollector(t)
	waitIdle(t)
	t.Logf("job %s: slurmd:\n%s", id, jobLines(slurmd(t), id))
	list, _ = exec.Command(portfilter.Nft(), "list", "table", "inet", portfilter.Table).CombinedOutput()
	if strings.Contains(string(list), "job_"+id+"_") {
		t.Errorf("the job's rules are left after its epilog:\n%s", list)
	}
}
