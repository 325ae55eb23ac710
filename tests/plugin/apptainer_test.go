package plugin_test

import (
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// TestContainerApptainerContained: on real Slurm, with the plugin's
// containment (its group, no_new_privs), a flagged job whose collector
// runs through the default apptainer line, unprivileged, with Debian
// sid's Apptainer inside the root file system GYM_OTEL_APPTAINER_ROOT
// (see helper/supervise TestContainerApptainer; skipped without it),
// entered with bubblewrap. The container's collector must be in the
// plugin's group of the job on every hierarchy, its files get the job's
// metrics, the drain its state, and nothing of it be left after the job.
func TestContainerApptainerContained(t *testing.T) {
	root := os.Getenv("GYM_OTEL_APPTAINER_ROOT")
	if root == "" {
		t.Skip("needs GYM_OTEL_APPTAINER_ROOT, a root file system with Apptainer")
	}
	bwrap := testenv.Binary(t, "bwrap", "/usr/bin/bwrap")
	waitIdle(t)
	hs := nodeHierarchies(t)
	u, err := user.Lookup(kit.User)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	// Apptainer looks the job's user up in the root file system's files.
	for f, line := range map[string]string{"etc/passwd": kit.User + ":x:" + u.Uid + ":" + u.Gid + "::/tmp:/bin/sh\n", "etc/group": kit.User + ":x:" + u.Gid + ":\n"} {
		data, _ := os.ReadFile(filepath.Join(root, f))
		if !strings.Contains("\n"+string(data), "\n"+kit.User+":") {
			fh, err := os.OpenFile(filepath.Join(root, f), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			fh.WriteString(line)
			fh.Close()
		}
	}
	// The job dirs' top dir, bound into the root file system at its path.
	top := filepath.Dir(jobsDir)
	if err := os.MkdirAll(filepath.Join(root, top), 0o755); err != nil {
		t.Fatal(err)
	}
	runtime := bwrap + " --bind " + root + " / --dev-bind /dev /dev --proc /proc --bind /sys /sys --tmpfs /run --tmpfs /tmp --bind " + top + " " + top + " " +
		config.DefaultContainerRuntime
	sitePath := filepath.Join(plugDir, "site.yaml")
	site, err := os.ReadFile(sitePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sitePath, []byte(string(site)+"  container: /img\n  container_runtime: "+runtime+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.WriteFile(sitePath, site, 0o644) })

	d := markerDir(t, "apptainer")
	script := writeScript(t, filepath.Base(d)+".sh", "sleep 6\n")
	r := asUser(t, 60*time.Second, tokenEnv(), "sbatch -w gn1 -n1 --gym-otel=job_dir="+d+"/run-%j -o "+d+"/%j.out "+script)
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	id := jobIDOf(t, r)
	out := filepath.Join(d, "run-"+id, "otel")
	rel := "gym_otel/" + clusterName() + "/gn1/job_" + id
	waitFile(t, 60*time.Second, filepath.Join(out, "collector.log"))
	var coll int
	for deadline := time.Now().Add(30 * time.Second); coll == 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, pid := range uidProcs(uid) {
			if strings.HasPrefix(cmdlineOf(pid), "/otelcol-gym\x00--config\x00"+out+"/") {
				coll = pid
			}
		}
	}
	if coll == 0 {
		log, _ := os.ReadFile(filepath.Join(out, "collector.log"))
		state, _ := os.ReadFile(filepath.Join(out, "state.json"))
		t.Fatalf("no collector of job %s in a container; collector.log:\n%s\nstate.json:\n%s", id, log, state)
	}
	pc, _ := os.ReadFile("/proc/" + strconv.Itoa(coll) + "/cgroup")
	if miss := notInGroup(hs, string(pc), rel); miss != "" {
		t.Errorf("the container's collector (pid %d) is outside the job's group %s in %s:\n%s", coll, rel, miss, pc)
	}
	waitJobsGone(t, 120*time.Second, []string{id})
	waitNoCollector(t)
	waitIdle(t)
	for _, pid := range uidProcs(uid) {
		if c := cmdlineOf(pid); strings.Contains(c, "apptainer") || strings.Contains(c, "bwrap") || strings.Contains(c, "otelcol-gym") {
			t.Errorf("left after job %s: %d %q", id, pid, c)
		}
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h.Mount, rel)); err == nil {
			t.Errorf("job %s: its group is left in %s", id, h.Mount)
		}
	}
	state, _ := os.ReadFile(filepath.Join(out, "state.json"))
	if !strings.Contains(string(state), `"status": "drained"`) || strings.Contains(string(state), "export_problems") {
		t.Errorf("state.json: %s", state)
	}
	if n := jsonlLines(t, out); n["metrics.jsonl"] == 0 {
		t.Errorf("job %s: no metrics in its files: %v", id, n)
	}
	ready := regexp.MustCompile(`job ` + id + `: collector ready on gn1 .*`).FindString(slurmdLogs(t))
	if ready == "" {
		t.Errorf("job %s: no ready line in slurmd's log", id)
	}
	t.Logf("job %s: the container's collector (pid %d) in %s; %s", id, coll, rel, ready)
}
