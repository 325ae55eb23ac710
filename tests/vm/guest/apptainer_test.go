//go:build vmguest

package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// imageRoot is where TestContainerApptainer makes its image: a root file
// system (a sandbox dir image) and a SIF file made from it.
const imageRoot = "/var/lib/gym-vm-image"

// makeImage makes the collector's image from a root file system the test
// assembles from the node's own files (no registry): dash as /bin/sh, the
// C library it needs, the node's collector as /otelcol-gym, and the mount
// points Apptainer binds over. It returns the sandbox dir and a SIF file
// built from it by `apptainer build` (root, mksquashfs).
func makeImage(t *testing.T) (sandbox, sif string) {
	t.Helper()
	sandbox, sif = filepath.Join(imageRoot, "rootfs"), filepath.Join(imageRoot, "otelcol-gym.sif")
	_ = os.RemoveAll(imageRoot)
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "var/tmp", "home", "root", "run", "mnt"} {
		if err := os.MkdirAll(filepath.Join(sandbox, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.Chmod(filepath.Join(sandbox, "tmp"), 0o1777)
	_ = os.Chmod(filepath.Join(sandbox, "var/tmp"), 0o1777)
	cp := func(src, dst string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(sandbox, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := run("cp", "-L", src, filepath.Join(sandbox, dst)); err != nil {
			t.Fatalf("cp %s: %v %s", src, err, out)
		}
	}
	dash, err := exec.LookPath("dash")
	if err != nil {
		t.Fatal(err)
	}
	cp(dash, "bin/sh")
	cp(collector, "otelcol-gym")
	// The C library and loader of each, at the paths ldd names.
	for _, bin := range []string{dash, collector} {
		out, _ := run("ldd", bin)
		for _, m := range regexp.MustCompile(`(?m)(/\S+\.so[.0-9]*)`).FindAllString(out, -1) {
			cp(m, m)
		}
	}
	files := map[string]string{
		"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":       "root:x:0:\n",
		"etc/hosts":       "127.0.0.1 localhost\n",
		"etc/resolv.conf": "",
		"etc/hostname":    "",
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(sandbox, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run("chmod", "-R", "go+rX", imageRoot); err != nil {
		t.Fatalf("chmod: %v %s", err, out)
	}
	start := time.Now()
	if out, err := run("apptainer", "build", "--force", sif, sandbox); err != nil {
		t.Fatalf("apptainer build %s %s: %v\n%s", sif, sandbox, err, out)
	}
	_ = os.Chmod(sif, 0o644)
	du, _ := run("du", "-sh", sandbox, sif)
	t.Logf("image: %s (sandbox dir), %s built from it in %.1f s; %s", sandbox, sif, time.Since(start).Seconds(), strings.Join(strings.Fields(du), " "))
	return sandbox, sif
}

// procInfo is one process of the node: its pid, uid, command line (NULs
// as spaces), cgroup (the v2 path) and environment (NUL-separated).
type procInfo struct {
	pid          int
	uid          int
	cmd, cgroup  string
	environ, raw []byte
}

// procs lists every process of the node (root reads them all).
func procs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var ps []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p := fmt.Sprintf("/proc/%d", pid)
		raw, err := os.ReadFile(p + "/cmdline")
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil {
			continue
		}
		cg, _ := os.ReadFile(p + "/cgroup")
		env, _ := os.ReadFile(p + "/environ")
		ps = append(ps, procInfo{pid: pid, uid: int(st.Uid), raw: raw, environ: env,
			cmd:    strings.TrimSpace(strings.ReplaceAll(string(raw), "\x00", " ")),
			cgroup: strings.TrimPrefix(strings.TrimSpace(string(cg)), "0::")})
	}
	return ps
}

// envValue is the value of name in a NUL-separated environment, or "".
func envValue(environ []byte, name string) string {
	for _, kv := range strings.Split(string(environ), "\x00") {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// runtimeProc matches the command line of a process of Apptainer's (its
// CLI, its starter, the runtime parent, squashfuse) or of a collector.
var runtimeProc = regexp.MustCompile(`^((\S*/)?(apptainer|starter|starter-suid|squashfuse\S*|otelcol-gym)( |$)|Apptainer )`)

// TestContainerApptainer: the collector run from an image by the default
// container_runtime line (`apptainer exec --cleanenv --no-eval --bind
// {output}:{output} {image} /otelcol-gym --config {config}`), as the
// job's user, unprivileged (the supervisor sets no_new_privs: user
// namespaces, no setuid), under cgroup v2 and systemd with Slurm 26.05.
// Debian sid's Apptainer is in the guest's image; the image is made here
// from a root file system of the node's files. Two flagged jobs at once:
// one from the sandbox dir, one from a SIF file of it. For each, while
// the job runs: the container's collector and every process of
// Apptainer's are in the plugin's group of the job; the batch script's
// first OTLP POST to the job's endpoint is answered 200 (the prolog let
// the job start once the collector was healthy); the receiver token is in
// the collector's environment through APPTAINERENV_ alone (--cleanenv) and
// on no command line, the backend token (delivery from the files, the
// default: the supervisor sends) not at all. After the job:
// the step's span written through the {output} bind and received by the
// backend with the user's token, state.json drained without export
// problems, no process of Apptainer's or the collector's, no group, no
// token in any file of the job's, nothing of the job's user left in /tmp,
// /var/tmp or /dev/shm; what Apptainer wrote to the collector's log and
// the job user's home is logged (and no ERROR or FATAL line of its).
func TestContainerApptainer(t *testing.T) {
	waitIdle(t)
	ver, err := run("apptainer", "--version")
	if err != nil {
		t.Fatalf("apptainer --version: %v %s (the guest's image must hold Debian's apptainer)", err, ver)
	}
	t.Logf("%s", strings.TrimSpace(ver))
	sandbox, sif := makeImage(t)
	start := time.Now()
	home := "/home/" + jobUser
	type job struct {
		name, image, dir, id string
	}
	js := []*job{{name: "sandbox", image: sandbox}, {name: "sif", image: sif}}

	// One job after the other: under TCG on a loaded host one start
	// through Apptainer takes most of a minute.
	for _, j := range js {
		j.dir = jobDir(t, "apptainer-"+j.name)
		span := "apptainer-" + j.name + "-span"
		sh := script(t, filepath.Join(j.dir, "job.sh"), fmt.Sprintf(`#!/bin/sh
now=$(date +%%s%%N)
curl -sS -o /dev/null -w "%%{http_code}\n" -X POST -H "Content-Type: application/json" \
  -H "$(printf %%s "$OTEL_EXPORTER_OTLP_HEADERS" | sed "s/%%20/ /g; s/=/: /")" "$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces" \
  -d '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vm-apptainer"}}]},"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60d","spanId":"eee19b7ec3c1b175","name":"%[2]s","kind":1,"startTimeUnixNano":"'$now'","endTimeUnixNano":"'$now'"}]}]}]}' > %[1]s/post.tmp
mv %[1]s/post.tmp %[1]s/post.code
i=0; while [ ! -e %[1]s/end ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done
`, j.dir, span))
		r := asUser(t, patience, fmt.Sprintf("sbatch -n1 --mem=200M --gym-otel=container=%s,health_check_timeout_seconds=110,job_dir=%s/run -o %s/job.out %s", j.image, j.dir, j.dir, sh))
		if r.code != 0 {
			t.Fatalf("sbatch (%s): exit %d: %s", j.name, r.code, r.stderr)
		}
		j.id = jobIDOf(t, r)
		ended := false
		end := func() {
			if !ended {
				ended = true
				_ = os.WriteFile(filepath.Join(j.dir, "end"), nil, 0o644)
			}
		}
		defer end()
		out := filepath.Join(j.dir, "run", "otel")
		grp := "/" + groupPath(t, j.id)
		// The batch script has posted: the job runs, its collector ready.
		if !waitFor(patience, func() bool { _, err := os.Stat(filepath.Join(j.dir, "post.code")); return err == nil }) {
			log, _ := os.ReadFile(filepath.Join(out, "collector.log"))
			jo, _ := os.ReadFile(filepath.Join(j.dir, "job.out"))
			t.Fatalf("%s: job %s never ran its batch script; job output:\n%s\ncollector.log:\n%s\nslurmd:\n%s", j.name, j.id, jo, log, jobLines(slurmd(t), j.id))
		}
		var coll procInfo
		ps := procs()
		for _, p := range ps {
			if bytes.HasPrefix(p.raw, []byte("/otelcol-gym\x00--config\x00"+out+"/")) {
				coll = p
			}
		}
		if coll.pid == 0 {
			log, _ := os.ReadFile(filepath.Join(out, "collector.log"))
			sup, _ := os.ReadFile(filepath.Join(out, "supervisor.log"))
			ps, _ := run("ps", "-eo", "pid,user,cgroup:80,args")
			t.Fatalf("%s: job %s: no collector of the container (/otelcol-gym --config %s/...); collector.log:\n%s\nsupervisor.log:\n%s\nslurmd:\n%s\nps:\n%s", j.name, j.id, out, log, sup, jobLines(slurmd(t), j.id), ps)
		}
		if coll.uid != 2000 {
			t.Errorf("%s: the container's collector runs as uid %d, want the job user's 2000", j.name, coll.uid)
		}
		if coll.cgroup != grp {
			t.Errorf("%s: the container's collector (pid %d) is in %s, want the plugin's group %s", j.name, coll.pid, coll.cgroup, grp)
		}
		code, _ := os.ReadFile(filepath.Join(j.dir, "post.code"))
		if strings.TrimSpace(string(code)) != "200" {
			t.Errorf("%s: the batch script's first OTLP POST to the job's collector: %q, want 200 (the job started before its collector was healthy?)", j.name, strings.TrimSpace(string(code)))
		}
		recv := envValue(coll.environ, "GYM_OTEL_RECEIVER_TOKEN")
		// Delivery from the files (the default): the supervisor sends to
		// the backend; the collector has no backend exporter, and no
		// backend token.
		if got := envValue(coll.environ, "OTEL_TOKEN"); got != "" || bytes.Contains(coll.environ, []byte(token)) {
			t.Errorf("%s: the container's collector has the backend token in its environment (OTEL_TOKEN %d bytes) with delivery from the files", j.name, len(got))
		}
		if recv == "" {
			t.Errorf("%s: the container's collector has no GYM_OTEL_RECEIVER_TOKEN", j.name)
		}
		var names []string
		for _, kv := range strings.Split(string(coll.environ), "\x00") {
			if n, _, ok := strings.Cut(kv, "="); ok {
				names = append(names, n)
			}
		}
		var tree []string
		carriers := 0
		for _, p := range ps {
			if p.uid != 2000 {
				continue
			}
			if envValue(p.environ, "APPTAINERENV_OTEL_TOKEN") == token {
				carriers++
			}
			if p.cgroup == grp || strings.HasPrefix(p.cgroup, grp+"/") {
				tree = append(tree, fmt.Sprintf("%d %s", p.pid, p.cmd))
			} else if runtimeProc.MatchString(p.cmd) && !strings.Contains(p.cgroup, "/job_") {
				// A process of Apptainer's or a collector outside every
				// group of the jobs (the other job's group is its own).
				t.Errorf("%s: %d %q is outside the plugin's groups: %s", j.name, p.pid, p.cmd, p.cgroup)
			}
		}
		for _, p := range ps {
			for _, tok := range []string{token, recv} {
				if tok != "" && bytes.Contains(p.raw, []byte(tok)) && !strings.HasPrefix(p.cmd, "curl ") {
					t.Errorf("%s: a token is on the command line of %d (uid %d)", j.name, p.pid, p.uid)
				}
			}
		}
		// Who reads the plugin token: the runtime's processes are the
		// job user's and dumpable (its own uid reads their environment,
		// the admin guide says so); another uid reads none.
		if ptoken := envValue(coll.environ, "GYM_OTEL_PLUGIN_TOKEN"); ptoken == "" {
			t.Errorf("%s: the container's collector has no GYM_OTEL_PLUGIN_TOKEN", j.name)
		} else {
			holders, own := 0, 0
			for _, p := range ps {
				if !bytes.Contains(p.environ, []byte(ptoken)) {
					continue
				}
				holders++
				environ := fmt.Sprintf("/proc/%d/environ", p.pid)
				if b, err := readAsUID(environ, "2000"); err == nil && bytes.Contains(b, []byte(ptoken)) {
					own++
				}
				if b, err := readAsUID(environ, other); err == nil && bytes.Contains(b, []byte(ptoken)) {
					t.Errorf("%s: another uid (nobody) read the plugin token from %s (%s)", j.name, environ, p.cmd)
				}
			}
			t.Logf("%s: the plugin token in the start environment of %d processes; the job's user read it from %d of them, nobody from none", j.name, holders, own)
		}
		m := regexp.MustCompile(`job ` + j.id + `: collector ready on ` + node + ` \(.*, (\d+) ms, .*\)`).FindStringSubmatch(slurmd(t))
		if m == nil {
			t.Errorf("%s: job %s: no ready line in slurmd's log", j.name, j.id)
		} else {
			t.Logf("%s: job %s ready in %s ms; the collector %d (uid %d) in %s; the plugin's group holds:\n  %s\n%d process(es) of the user with APPTAINERENV_OTEL_TOKEN in their start environment; the collector's environment has %v",
				j.name, j.id, m[1], coll.pid, coll.uid, coll.cgroup, strings.Join(tree, "\n  "), carriers, names)
		}
		end()
		waitJobsGone(t, []string{j.id})
	}
	waitNoCollector(t)
	waitIdle(t)
	log := slurmd(t)
	for _, p := range procs() {
		if p.uid == 2000 && runtimeProc.MatchString(p.cmd) {
			t.Errorf("left after the jobs: %d %q in %s", p.pid, p.cmd, p.cgroup)
		}
	}
	backend := ""
	waitFor(30*time.Second, func() bool {
		b, _ := os.ReadFile("/var/lib/gym-backend/traces.jsonl")
		backend = string(b)
		return strings.Contains(backend, "apptainer-sandbox-span") && strings.Contains(backend, "apptainer-sif-span")
	})
	for _, j := range js {
		out := filepath.Join(j.dir, "run", "otel")
		t.Logf("%s: job %s: slurmd:\n%s", j.name, j.id, jobLines(log, j.id))
		if _, err := os.Stat("/sys/fs/cgroup/" + groupPath(t, j.id)); err == nil {
			t.Errorf("%s: job %s: its group is left", j.name, j.id)
		}
		if !regexp.MustCompile(`job ` + j.id + `: collector cgroup \S+: peak memory`).MatchString(log) {
			t.Errorf("%s: job %s: no cost line of its group (the epilog did not end it)", j.name, j.id)
		}
		state, _ := os.ReadFile(filepath.Join(out, "state.json"))
		if !strings.Contains(string(state), `"status": "drained"`) || strings.Contains(string(state), "export_problems") {
			// With the receipt's figures and the backend exporter's
			// lines: what the problem was read from.
			rc, _ := os.ReadFile(filepath.Join(out, "receipt.json"))
			var lines []string
			if b, err := os.ReadFile(filepath.Join(out, "collector.log")); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if strings.Contains(l, "otlp_http/backend") || strings.HasPrefix(l, "gym-otel:") {
						lines = append(lines, l)
					}
				}
			}
			t.Errorf("%s: state.json: %s\nreceipt.json: %s\nthe backend exporter's lines in collector.log:\n%s", j.name, state, rc, strings.Join(lines, "\n"))
		}
		tr, _ := os.ReadFile(filepath.Join(out, "traces.jsonl"))
		if !strings.Contains(string(tr), "apptainer-"+j.name+"-span") {
			t.Errorf("%s: the step's span is not in the job's traces.jsonl (written through the {output} bind)", j.name)
		}
		if st, err := os.Stat(filepath.Join(out, "metrics.jsonl")); err != nil || st.Size() == 0 {
			t.Errorf("%s: no metrics in the job's metrics.jsonl: %v", j.name, err)
		}
		if !strings.Contains(backend, "apptainer-"+j.name+"-span") {
			t.Errorf("%s: the backend has not the step's span (sent by the supervisor from the files with the user's token)", j.name)
		}
		// What Apptainer said: its lines in the collector's log.
		var said []string
		if f, err := os.Open(filepath.Join(out, "collector.log")); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				l := sc.Text()
				if regexp.MustCompile(`^(INFO|WARNING|ERROR|FATAL|VERBOSE|DEBUG):`).MatchString(l) {
					said = append(said, l)
					if strings.HasPrefix(l, "ERROR") || strings.HasPrefix(l, "FATAL") {
						t.Errorf("%s: Apptainer: %s", j.name, l)
					}
				}
			}
			f.Close()
		}
		t.Logf("%s: Apptainer's lines in collector.log: %d\n  %s", j.name, len(said), strings.Join(said, "\n  "))
		// No token in any file of the job's.
		_ = filepath.WalkDir(j.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte(token)) {
				t.Errorf("%s: the user's token is in %s", j.name, p)
			}
			return nil
		})
	}
	// What the runtime wrote on the node: files of the job's user made
	// since the jobs' submission, in the user's home (logged) and in the
	// shared temporary dirs (none may be left).
	var wrote, left []string
	for _, top := range []string{home, "/tmp", "/var/tmp", "/dev/shm"} {
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil || p == top {
				return nil
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok || st.Uid != 2000 || info.ModTime().Before(start) {
				return nil
			}
			if top == home {
				wrote = append(wrote, p)
			} else {
				left = append(left, p)
			}
			return nil
		})
	}
	t.Logf("written in %s since the submission: %d: %v", home, len(wrote), wrote)
	if len(left) > 0 {
		t.Errorf("left in the shared temporary dirs by the job's user: %v", left)
	}
	if j, _ := exec.Command("journalctl", "-q", "--no-pager", "--since", "@"+strconv.FormatInt(start.Unix(), 10), "-g", "(?i)apptainer|squashfuse").CombinedOutput(); len(bytes.TrimSpace(j)) > 0 {
		t.Logf("the journal on Apptainer since the submission:\n%s", j)
	}
}
