package callbacks

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/gym-otel-spank/gym-otel-spank/helper/launch"
	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// fakeSupervisor is a `supervise --from-env` stand-in that the prolog
// starts as the job's user: it notes the ports and the receiver token root
// handed down (one line per start in <dir>/seen), reports the first
// attempt's port as taken, and the second attempt ready on root's ports,
// then sleeps until killed.
const fakeSupervisor = `#!/bin/bash
seen=%DIR%/seen
echo "$GYM_OTEL_PORTS $GYM_OTEL_RECEIVER_TOKEN" >> $seen
IFS=, read g h he te pl fi <<< "$GYM_OTEL_PORTS"
if [ "$(wc -l < $seen)" -lt 2 ]; then
	printf '{"status":"failed","error":"listen tcp 127.0.0.1:%s: bind: address already in use","port_taken":true,"supervisor_pid":%d}\n' "$h" $$ >&3
	exit 1
fi
printf '{"status":"ready","ports":{"otlp_grpc":%s,"otlp_http":%s,"health":%s,"telemetry":%s,"final":%s,"plugin":%s},"supervisor_pid":%d,"output_dir":"/x"}\n' "$g" "$h" "$he" "$te" "$fi" "$pl" $$ >&3
exec 3>&-
exec sleep 60
`

// standInRun is a prolog run with a stand-in supervisor (standInProlog).
type standInRun struct {
	base string // the stand-in's dir, world-writable: %DIR% in its script
	cli  string // the stand-in's path
	err  error  // the prolog's
	rec  *record.Record
	hook *test.Hook // the prolog's log, debug included
}

// standInProlog runs the prolog for job as uid and gid 65534 (nobody) on
// node n1, with script (%DIR% its dir) as the supervisor and a site with
// a remote endpoint, no cgroup and port_filter mode; it fails the test
// unless root's record can be read, and kills the supervisor it names at
// the test's end.
func standInProlog(t *testing.T, prefix, script string, job uint32, mode string) standInRun {
	t.Helper()
	base, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o777); err != nil { // the stand-in, as the job's user, writes there
		t.Fatal(err)
	}
	r := standInRun{base: base, cli: filepath.Join(base, "cli")}
	if err := os.WriteFile(r.cli, []byte(strings.ReplaceAll(script, "%DIR%", base)), 0o755); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(base, "site.yaml")
	if err := os.WriteFile(site, []byte("otel:\n  endpoint: https://otlp.example.com\n  service_name: s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := Args{Site: site, PrologTimeout: 20, CLI: r.cli, RecordDir: filepath.Join(base, "records"), Cgroup: CgroupOff, PortFilter: mode}
	res, err := Submit(a, "", base, func(k string) (string, bool) {
		if k == "OTEL_TOKEN" {
			return "t", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"SLURMD_NODENAME": "n1", "SLURM_JOB_USER": "nobody", "SLURM_JOB_NODELIST": "n1"}
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	r.hook = hook
	r.err = Prolog(PrologInput{Args: a, Encoded: res.Encoded, Token: "t", JobID: job, UID: 65534, GID: 65534,
		Getenv: func(k string) string { return env[k] }}, log)
	r.rec, err = record.Read(record.JobDir(a.RecordDir, "n1", job))
	if err != nil {
		t.Fatalf("record: %v (prolog: %v)", err, r.err)
	}
	if pid := r.rec.SupervisorPID; pid > 1 {
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	}
	return r
}

// TestPrologRootChoices: the prolog chooses the job's ports and mints the
// receiver token itself and hands both down in the supervisor's
// environment; a report that a port was taken makes it choose new ports
// and start again; the ready record names the ports and the token root
// handed down in the second start, and the report it read carried none.
func TestPrologRootChoices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (root's record dir, a supervisor as another user)")
	}
	run := standInProlog(t, "rootchoices", fakeSupervisor, 78, "off")
	base, rec, hook := run.base, run.rec, run.hook
	if run.err != nil {
		t.Fatalf("prolog: %v", run.err)
	}
	seen, err := os.ReadFile(filepath.Join(base, "seen"))
	if err != nil {
		t.Fatal(err)
	}
	starts := strings.Split(strings.TrimSpace(string(seen)), "\n")
	if len(starts) != 2 {
		t.Fatalf("the supervisor was started %d times, want 2 (a port taken, then new ports): %q", len(starts), starts)
	}
	var ports []string
	var token string
	for i, s := range starts {
		p, tok, _ := strings.Cut(s, " ")
		if _, err := launch.ParsePorts(p); err != nil {
			t.Fatalf("start %d: %v", i+1, err)
		}
		if !strings.HasPrefix(tok, "gos_") || (token != "" && tok != token) {
			t.Fatalf("start %d: receiver token %q (before %q): want root's one token", i+1, tok, token)
		}
		ports, token = append(ports, p), tok
	}
	if ports[0] == ports[1] {
		t.Errorf("the second start got the same ports %s", ports[1])
	}
	second, _ := launch.ParsePorts(ports[1])
	vars := map[string]string{}
	for _, kv := range rec.Env {
		vars[kv.Key] = kv.Value
	}
	if rec.Status != record.StatusReady || vars["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://127.0.0.1:"+strconv.Itoa(second.OTLPHTTP) ||
		!strings.Contains(vars["OTEL_EXPORTER_OTLP_HEADERS"], token) {
		t.Errorf("record %+v: want ready, the endpoint on port %d and the token root handed down", rec, second.OTLPHTTP)
	}
	var warned bool
	for _, e := range hook.AllEntries() {
		warned = warned || strings.Contains(e.Message, "choosing new ports (attempt 2 of 3)")
	}
	if !warned {
		t.Errorf("no warning about the new ports: %v", hook.AllEntries())
	}
}

// standInReady ends a stand-in supervisor's script: it reports ready on
// the ports root handed down (on fd 3) and sleeps until killed.
const standInReady = `IFS=, read g h he te pl fi <<< "$GYM_OTEL_PORTS"
printf '{"status":"ready","ports":{"otlp_grpc":%s,"otlp_http":%s,"health":%s,"telemetry":%s,"final":%s,"plugin":%s},"supervisor_pid":%d,"output_dir":"/x"}\n' "$g" "$h" "$he" "$te" "$fi" "$pl" $$ >&3
exec 3>&-
exec sleep 60
`

// gateSupervisor is a `supervise --from-env` stand-in that notes its pid,
// then waits on the gate root handed down (launch.EnvGateFD) and notes what
// it read, and reports ready on root's ports only once the gate opened.
const gateSupervisor = `#!/bin/bash
seen=%DIR%/seen
echo "pid $$" >> $seen
if [ -z "$GYM_OTEL_GATE_FD" ]; then echo "no gate" >> $seen; exit 1; fi
if read -r -n1 -u "$GYM_OTEL_GATE_FD" c; then echo "gate $c" >> $seen; else echo "gate shut" >> $seen; exit 1; fi
` + standInReady

// TestPrologGate: the prolog starts the supervisor while it installs the
// packet filter and opens the supervisor's gate only once the filter's
// step is done: with port_filter=auto on a node that cannot filter (no
// cgroup) the gate opens and the start goes on; with port_filter=require
// there the gate ends without opening, the supervisor is ended before it
// reports, and root's record says why.
func TestPrologGate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (root's record dir, a supervisor as another user)")
	}
	for _, c := range []struct {
		mode      string
		wantReady bool
	}{{"auto", true}, {"require", false}} {
		t.Run(c.mode, func(t *testing.T) {
			run := standInProlog(t, "gate", gateSupervisor, 79, c.mode)
			base, cli, perr, rec := run.base, run.cli, run.err, run.rec
			seen, _ := os.ReadFile(filepath.Join(base, "seen"))
			lines := strings.Split(strings.TrimSpace(string(seen)), "\n")
			var pid int
			if len(lines) > 0 {
				pid, _ = strconv.Atoi(strings.TrimPrefix(lines[0], "pid "))
			}
			if pid > 1 {
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			}
			if c.wantReady {
				if perr != nil || rec.Status != record.StatusReady {
					t.Fatalf("prolog: %v; record status %q: want ready", perr, rec.Status)
				}
				if len(lines) != 2 || lines[1] != "gate g" {
					t.Fatalf("the supervisor saw %q: want its pid, then the gate open", lines)
				}
				return
			}
			if perr == nil || rec.Status != record.StatusFailed || !strings.Contains(rec.Reason, "port_filter=require") {
				t.Fatalf("prolog: %v; record %q %q: want failed, port_filter=require named", perr, rec.Status, rec.Reason)
			}
			for _, l := range lines[1:] {
				if l != "gate shut" {
					t.Fatalf("the supervisor saw %q past a filter that did not go in: want the gate shut, or nothing before its end", lines)
				}
			}
			// Ended before or after it noted its pid: either way, gone
			// when the prolog returns.
			procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range procs {
				if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), cli) {
					t.Fatalf("the supervisor (%s: %q) outlived the failed prolog", p, b)
				}
			}
		})
	}
}

// earlyEndSupervisor is a stand-in supervisor that, once its gate is
// open, reports its start failed at once and exits (an output dir
// refused): with a port taken on its first start, ready on its second.
const earlyEndSupervisor = `#!/bin/bash
seen=%DIR%/seen
echo start >> $seen
read -r -n1 -u "$GYM_OTEL_GATE_FD" c
if [ "$(wc -l < $seen)" -lt 2 ] && [ -e %DIR%/port-taken ]; then
	printf '{"status":"failed","error":"listen tcp 127.0.0.1:1: bind: address already in use","port_taken":true,"supervisor_pid":%d}\n' $$ >&3
	exit 1
fi
if [ ! -e %DIR%/port-taken ]; then
	printf '{"status":"failed","error":"output dir /x: is a symbolic link: refusing to follow it","supervisor_pid":%d}\n' $$ >&3
	exit 1
fi
` + standInReady

// TestPrologSupervisorGoneBeforeRecord: a supervisor that ends its start
// while root opens its gate and before root's record names it (a refused
// output dir, a port taken) is gone when root reads its process: the
// prolog takes its report, so the record names the report's reason, not
// "gone after its start", and a port taken is chosen anew.
func TestPrologSupervisorGoneBeforeRecord(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (root's record dir, a supervisor as another user)")
	}
	old := afterGate
	t.Cleanup(func() { afterGate = old })
	// After the gate opens: until the stand-in has exited and been reaped.
	afterGate = func() { time.Sleep(300 * time.Millisecond) }

	run := standInProlog(t, "gone", earlyEndSupervisor, 80, "off")
	if run.err == nil || run.rec.Status != record.StatusFailed || !strings.Contains(run.rec.Reason, "refusing to follow it") || strings.Contains(run.rec.Reason, "gone after its start") {
		t.Errorf("refused dir: prolog %v; record %q %q: want failed with the supervisor's reason", run.err, run.rec.Status, run.rec.Reason)
	}

	// The same stand-in with a port taken first, in a dir made ready for it.
	afterGate = func() { time.Sleep(300 * time.Millisecond) }
	script := strings.Replace(earlyEndSupervisor, "seen=%DIR%/seen", "seen=%DIR%/seen\ntouch %DIR%/port-taken", 1)
	run = standInProlog(t, "gone", script, 81, "off")
	if run.err != nil || run.rec.Status != record.StatusReady {
		t.Errorf("port taken, then ready: prolog %v; record %q %q: want ready on the second start", run.err, run.rec.Status, run.rec.Reason)
	}
}
