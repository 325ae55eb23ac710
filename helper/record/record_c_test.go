package record

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
	"github.com/gym-otel-spank/gym-otel-spank/helper/timing"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestRecordReadByC is the record's one test vector for both languages:
// a record written by Write (Go, the prolog) is read by
// spank/record.c (C, every step) compiled with a small driver, and each
// field the steps use must come out as Go wrote it. A final wait above the
// cap comes out as contract.MaxFinalWait, so the C bound and the Go constant cannot
// drift apart.
func TestRecordReadByC(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (the steps trust only a root-owned record)")
		return
	}
	dir := t.TempDir()
	bin := testenv.BuildCDriver(t, dir, "record", "record.c", `#include <stdio.h>
#include <stdlib.h>
#include "record.h"
int main(int argc, char **argv) {
	struct gos_record r;
	char err[512];
	(void)argc;
	if (gos_record_read(argv[1], argv[2], (uint32_t)atoi(argv[3]), &r, err, sizeof(err))) {
		printf("error=%s\n", err);
		return 1;
	}
	printf("ready=%d\nfail=%d\nreason=%s\nfinal_wait=%d\n", r.ready, r.fail, r.reason, r.final_wait);
	printf("cgroup_memory=%s\ncgroup_cpuset=%s\n", r.cgroup_memory, r.cgroup_cpuset);
	printf("hold_socket=%s\n", r.control_socket);
	printf("output_dir=%s\nbackend=%s\n", r.output_dir, r.backend);
	printf("supervisor=%ld/%llu alive=%d\n", r.supervisor_pid, r.supervisor_start, gos_supervisor_alive(&r));
	for (int i = 0; i < r.nenv; i++)
		printf("env=%s\n", r.env[i]);
	for (int i = 0; i < r.nunset; i++)
		printf("unset=%s\n", r.unset[i]);
	for (int i = 0; i < r.nresattr; i++)
		printf("resattr=%s\n", r.resattr[i]);
	gos_record_free(&r);
	return 0;
}
`)
	records := filepath.Join(dir, "records")
	rec := &Record{
		Status: "ready", OnFailure: "fail", Reason: "a reason = with, odd characters",
		DrainTimeout: 20, SupervisorPID: 4242, SupervisorStart: 987654321, UID: 2001,
		Cgroup:        "gym_otel/c/n1/job_7",
		CgroupMemory:  "/sys/fs/cgroup/memory/gym_otel/c/n1/job_7/memory.limit_in_bytes",
		CgroupCpuset:  "/sys/fs/cgroup/cpuset/gym_otel/c/n1/job_7/cpuset.cpus",
		ControlSocket: "/run/gym-otel/n1/7/hold/sock",
		OutputDir:     "/lustre/runs/r 1/otel",
		Backend:       "https://otlp.example.com:4318/base",
		Env:           []KV{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, {"OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer gos_x=y"}},
		Unset:         []string{"OTEL_TOKEN", "SLURM_SPANK_GYM_OTEL_TOKEN"},
		ResAttrs:      []KV{{"slurm.job.user", "al%20ice%2Cx%3Dy"}, {"nv.dl.job.uuid", "9a6e5010-16a8-54fc-8445-d1e1b1fffcd2"}},
	}
	maxFW := timing.Seconds(contract.MaxFinalWait)
	for _, c := range []struct{ finalWait, want int }{{16, 16}, {0, 0}, {maxFW + 15, maxFW}} {
		rec.FinalWait = c.finalWait
		jobDir, err := MakeJobDir(records, "n1", 7)
		if err != nil {
			t.Fatal(err)
		}
		if err := Write(jobDir, rec); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, records, "n1", "7").CombinedOutput()
		if err != nil {
			t.Fatalf("the C reader: %v\n%s", err, out)
		}
		want := fmt.Sprintf("ready=1\nfail=1\nreason=%s\nfinal_wait=%d\ncgroup_memory=%s\ncgroup_cpuset=%s\nhold_socket=%s\noutput_dir=%s\nbackend=%s\nsupervisor=%d/%d alive=0\n",
			rec.Reason, c.want, rec.CgroupMemory, rec.CgroupCpuset, rec.ControlSocket, rec.OutputDir, rec.Backend, rec.SupervisorPID, rec.SupervisorStart)
		for _, kv := range rec.Env {
			want += "env=" + kv.Key + "=" + kv.Value + "\n"
		}
		for _, n := range rec.Unset {
			want += "unset=" + n + "\n"
		}
		for _, kv := range rec.ResAttrs {
			want += "resattr=" + kv.Key + "=" + kv.Value + "\n"
		}
		if string(out) != want {
			t.Errorf("final_wait %d: C read\n%s\nGo wrote\n%s", c.finalWait, out, want)
		}
		back, err := Read(jobDir)
		if err != nil || back.FinalWait != c.finalWait || back.CgroupCpuset != rec.CgroupCpuset || back.ControlSocket != rec.ControlSocket || len(back.Env) != 2 {
			t.Errorf("Go read back %+v %v", back, err)
		}
	}
	// The steps' liveness check of the supervisor (gos_supervisor_alive):
	// a running process with the recorded start time is alive; the same
	// pid with another start time (a reused pid) or a pid that has exited
	// is not.
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer sleeper.Process.Kill()
	ps, err := proc.ReadStat(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	alive := func(pid int, start uint64) string {
		t.Helper()
		rec.SupervisorPID, rec.SupervisorStart = pid, start
		jobDir, err := MakeJobDir(records, "n1", 8)
		if err != nil {
			t.Fatal(err)
		}
		if err := Write(jobDir, rec); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command(bin, records, "n1", "8").CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "supervisor=") {
				return l
			}
		}
		t.Fatalf("no supervisor line: %s", out)
		return ""
	}
	pid := sleeper.Process.Pid
	if got, want := alive(pid, ps.StartTime), fmt.Sprintf("supervisor=%d/%d alive=1", pid, ps.StartTime); got != want {
		t.Errorf("a running supervisor: %q, want %q", got, want)
	}
	if got := alive(pid, ps.StartTime+1); !strings.HasSuffix(got, "alive=0") {
		t.Errorf("another start time (a reused pid): %q", got)
	}
	sleeper.Process.Kill()
	sleeper.Wait()
	if got := alive(pid, ps.StartTime); !strings.HasSuffix(got, "alive=0") {
		t.Errorf("an exited supervisor: %q", got)
	}
	if got := alive(0, 0); !strings.HasSuffix(got, "alive=0") {
		t.Errorf("no supervisor: %q", got)
	}

	// A control socket that is no absolute path (an older record's abstract
	// name), climbs with "..", or is longer than a socket's path is not
	// taken by C; the longest path a socket can have is.
	jobDir9, err := MakeJobDir(records, "n1", 9)
	if err != nil {
		t.Fatal(err)
	}
	longest := "/" + strings.Repeat("x", contract.ControlPathMax-1)
	for _, c := range []struct{ path, want string }{
		{"gym-otel-hold-0123456789abcdef", ""}, {"/run/gym-otel/../x/sock", ""}, {longest + "x", ""}, {longest, longest},
	} {
		rec.ControlSocket = c.path
		if err := Write(jobDir9, rec); err != nil {
			t.Fatal(err)
		}
		if out, _ := exec.Command(bin, records, "n1", "9").CombinedOutput(); !strings.Contains(string(out), "hold_socket="+c.want+"\n") {
			t.Errorf("control socket %q: C read %s", c.path, out)
		}
	}

	// A record written before the supervisor's report (StatusStarting:
	// the ports, the task env and the supervisor already in it) is not
	// ready for a step, which would then set no env; Go reads it back as
	// written, for the epilog.
	rec.ControlSocket = ""
	for _, c := range []struct{ status, ready string }{{StatusStarting, "ready=0\n"}, {StatusReady, "ready=1\n"}, {StatusFailed, "ready=0\n"}} {
		rec.Status = c.status
		if err := Write(jobDir9, rec); err != nil {
			t.Fatal(err)
		}
		if out, _ := exec.Command(bin, records, "n1", "9").CombinedOutput(); !strings.HasPrefix(string(out), c.ready) {
			t.Errorf("status %s: C read %s", c.status, out)
		}
		if back, err := Read(jobDir9); err != nil || back.Status != c.status || len(back.Env) != len(rec.Env) {
			t.Errorf("status %s: Go read back %+v, %v", c.status, back, err)
		}
	}

	// A record that is not root-only is read by neither side.
	jobDir := JobDir(records, "n1", 7)
	if err := os.Chmod(filepath.Join(jobDir, contract.RecordFile), 0o666); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, records, "n1", "7").CombinedOutput(); err == nil || !strings.Contains(string(out), "not a root-only regular file") {
		t.Errorf("C read a world-writable record: %s", out)
	}
	if _, err := Read(jobDir); err == nil {
		t.Error("Go read a world-writable record")
	}
}
