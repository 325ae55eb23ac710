package callbacks

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sirupsen/logrus/hooks/test"

	"github.com/gym-otel-spank/gym-otel-spank/helper/record"
)

// energySupervisor is a `supervise --from-env` stand-in, run as the job's
// user: it notes the host energy variable root set, then for each
// descriptor it names the descriptor's open flags and what it reads on it,
// and whether the zone's path opens for it (root's only: it must not),
// then the host power source root named (hwmon: read by the supervisor
// itself), then reports ready on root's ports.
const energySupervisor = `#!/bin/bash
out=%DIR%/seen
echo "env $GYM_OTEL_HOST_ENERGY" > $out
IFS=, read -ra zones <<< "$GYM_OTEL_HOST_ENERGY"
for z in "${zones[@]}"; do
	fd=${z%%%%:*}
	flags=$(awk '/^flags:/ {print $2}' /proc/self/fdinfo/$fd)
	read -r v <&$fd
	echo "fd $fd flags $flags value $v" >> $out
done
if cat %TREE%/intel-rapl:0/energy_uj >/dev/null 2>&1; then echo "path readable" >> $out; else echo "path refused" >> $out; fi
echo "power $GYM_OTEL_HOST_POWER" >> $out
` + standInReady

// TestPrologHostEnergy: with host_power=rapl the prolog, as root, opens
// the zones of a powercap tree the test writes (energy_uj mode 0400, as
// the kernel has it since CVE-2020-8694) and hands the supervisor, run as
// the job's user, read-only descriptors named in its environment with
// their ranges: it reads the counters through them, and cannot open the
// path itself, and no hwmon choice. With host_power=hwmon it gets no
// descriptor and the hwmon choice (launch.EnvHostPower); with auto, the
// zones where the node has RAPL, else the hwmon choice. With host_power
// off it gets neither.
func TestPrologHostEnergy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (energy_uj root's only, a supervisor as another user)")
	}
	base, err := os.MkdirTemp("", "hostenergy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o777); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(base, "powercap")
	for _, z := range []struct{ dir, name, energy, max string }{
		{"intel-rapl:0", "package-0", "123456", "262143328850"},
		{"intel-rapl:0:0", "dram", "7890", "65712999613"},
	} {
		d := filepath.Join(tree, z.dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, v := range map[string]string{"name": z.name, "energy_uj": z.energy, "max_energy_range_uj": z.max} {
			mode := os.FileMode(0o444)
			if f == "energy_uj" {
				mode = 0o400
			}
			if err := os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	old := powercapRoot
	powercapRoot = tree
	t.Cleanup(func() { powercapRoot = old })
	cli := filepath.Join(base, "cli")
	script := strings.NewReplacer("%DIR%", base, "%TREE%", tree, "%%%%", "%%").Replace(energySupervisor)
	if err := os.WriteFile(cli, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(base, "site.yaml")
	if err := os.WriteFile(site, []byte("otel:\n  endpoint: https://otlp.example.com\n  service_name: s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(hostPower string, job uint32) string {
		t.Helper()
		a := Args{Site: site, PrologTimeout: 20, CLI: cli, RecordDir: filepath.Join(base, "records"), Cgroup: CgroupOff, PortFilter: "off", HostPower: hostPower}
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
		log, _ := test.NewNullLogger()
		perr := Prolog(PrologInput{Args: a, Encoded: res.Encoded, Token: "t", JobID: job, UID: 65534, GID: 65534,
			Getenv: func(k string) string { return env[k] }}, log)
		rec, rerr := record.Read(record.JobDir(a.RecordDir, "n1", job))
		if rerr == nil && rec.SupervisorPID > 1 {
			t.Cleanup(func() { syscall.Kill(rec.SupervisorPID, syscall.SIGKILL) })
		}
		if perr != nil || rerr != nil {
			t.Fatalf("prolog: %v; record: %v", perr, rerr)
		}
		seen, err := os.ReadFile(filepath.Join(base, "seen"))
		if err != nil {
			t.Fatal(err)
		}
		return string(seen)
	}
	seen := run(HostPowerRAPL, 81)
	lines := strings.Split(strings.TrimSpace(seen), "\n")
	// fd 3 the readiness pipe, fd 4 the control socket, fd 5 the gate,
	// then the zones.
	want := []string{"env 6:package-0:262143328850,7:package-0/dram:65712999613", "value 123456", "value 7890", "path refused", "power"}
	if len(lines) != 5 || strings.TrimSpace(lines[4]) != "power" {
		t.Fatalf("the supervisor saw:\n%s", seen)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d %q: want %q", i+1, lines[i], w)
		}
	}
	for _, l := range lines[1:3] {
		// fdinfo's flags are octal: the access mode O_RDONLY.
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "flags" {
			t.Errorf("%q: no flags", l)
			continue
		}
		if fl, err := strconv.ParseInt(f[3], 8, 64); err != nil || fl&syscall.O_ACCMODE != syscall.O_RDONLY {
			t.Errorf("%q: want a read-only descriptor", l)
		}
	}
	none := func(seen string) string {
		var l []string
		for _, x := range strings.Split(strings.TrimSpace(seen), "\n") {
			l = append(l, strings.TrimSpace(x))
		}
		return strings.Join(l, "|")
	}
	if seen := run(HostPowerOff, 82); none(seen) != "env|path refused|power" {
		t.Errorf("host_power=off: the supervisor saw:\n%s", seen)
	}
	if seen := run(HostPowerHwmon, 83); none(seen) != "env|path refused|power hwmon" {
		t.Errorf("host_power=hwmon: the supervisor saw:\n%s", seen)
	}
	if seen := run(HostPowerAuto, 84); !strings.HasPrefix(seen, want[0]+"\n") || !strings.HasSuffix(none(seen), "|path refused|power") {
		t.Errorf("host_power=auto on a node with RAPL: the supervisor saw:\n%s\nwant the zones, no hwmon", seen)
	}
	powercapRoot = filepath.Join(base, "no-powercap")
	if seen := run(HostPowerAuto, 85); none(seen) != "env|path refused|power hwmon" {
		t.Errorf("host_power=auto on a node without RAPL: the supervisor saw:\n%s\nwant hwmon", seen)
	}
}
