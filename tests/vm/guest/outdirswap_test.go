//go:build vmguest

package guest

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
)

// evilConfig is the attacker's collector configuration: loaded by a
// victim's collector, it writes the backend token (OTEL_TOKEN, the site's
// token_env) into the attacker's dir with the collector's own log lines.
// The jobs ask delivery=collector, the one delivery whose collector holds
// the backend token (under files it holds the receiver token only), so
// that a loaded configuration would have the token to write.
func evilConfig(attacker string) string {
	return fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:0
exporters:
  file:
    path: %[1]s/leak.jsonl
service:
  telemetry:
    metrics:
      level: none
    logs:
      output_paths: [%[1]s/leak.log]
      initial_fields:
        stolen: ${env:OTEL_TOKEN}
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
`, attacker)
}

// TestHostileOutputDirSwapGuest: the host's TestHostileOutputDirSwap on
// cgroup v2 under systemd. Another user (nobody) who can write the job dir
// (mode 0777, the job's user's: a group-writable project dir without the
// sticky bit) races each job's supervisor for its output dir with the
// host's attacker (tests/standins dirswap-standin, built static into the
// payload): it renames every real otel away the moment it appears, puts a
// link to its own dir in its place, removes the link after a few
// milliseconds so that the next try makes a real dir again, and replaces
// any collector.yaml that lands in its dir with one that writes the backend
// token out. Three jobs start under the race: each is refused (a link
// found at the open, or its otel renamed away or replaced between its
// making and its opening: each refusal says whoever can write its parent
// could have done it) or its files land in the real dir its supervisor
// made, wherever that was renamed to. A fourth job, whose predictable job
// dir the attacker made first (a scratch space), is refused: the job dir
// is another user's. The attacker's dir never gets a file of the job's
// user, its configuration is never loaded, and the backend token is in no
// file under the test's dirs, the attacker's or the jobs'.
func TestHostileOutputDirSwapGuest(t *testing.T) {
	waitIdle(t)
	swapper := filepath.Join(payload, "bin", "dirswap")
	if _, err := os.Stat(swapper); err != nil {
		t.Fatalf("the attacker: %v", err)
	}
	if token == "" {
		t.Fatal("GYM_VM_TOKEN is empty: the token's absence could not be told")
	}
	uid, _ := strconv.Atoi(userID(t, jobUser))
	base := jobDir(t, "swap")
	attacker := filepath.Join(base, "attacker")
	if err := os.Mkdir(attacker, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(attacker, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(attacker, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(base, "evil.yaml")
	if err := os.WriteFile(evil, []byte(evilConfig(attacker)), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := script(t, filepath.Join(base, "job.sh"), "#!/bin/sh\nsleep 3\necho done\n")

	// race runs one job with job_dir job while the attacker plays nobody;
	// out is sbatch's stderr, the job's output and slurmd's lines of the job.
	race := func(name, job string) (jobID, out, counts string) {
		stop := filepath.Join(base, name+".stop")
		var sout bytes.Buffer
		sw := asOther(swapper, job, attacker, evil, stop)
		sw.Stdout, sw.Stderr = &sout, &sout
		if err := sw.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = sw.Wait(); close(done) }()
		t.Cleanup(func() {
			select {
			case <-done:
			default:
				_ = sw.Process.Kill()
				<-done
			}
		})
		time.Sleep(500 * time.Millisecond) // the loop is running
		outFile := filepath.Join(base, name+".out")
		start := time.Now()
		r := asUser(t, patience, fmt.Sprintf("sbatch --wait -n1 --mem=200M --gym-otel=job_dir=%s,delivery=collector -o %s %s", job, outFile, sh))
		took := time.Since(start)
		if err := os.WriteFile(stop, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the attacker did not stop", name)
		}
		id := jobIDOf(t, r)
		// sbatch --wait returns once the job is finished, which Slurm
		// says while the job is still COMPLETING: its epilog, and the
		// drain that writes the receipt, may still run. Look once the
		// job has left the queue (squeue lists COMPLETING jobs).
		waitJobsGone(t, []string{id})
		o, _ := os.ReadFile(outFile)
		t.Logf("%s: job %s, sbatch --wait %.1f s, out of the queue %.1f s, exit %d", name, id, took.Seconds(), time.Since(start).Seconds(), r.code)
		return id, r.stderr + string(o) + jobLines(slurmd(t), id), strings.TrimSpace(sout.String())
	}

	var swaps, links, held, refused int
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("job%d", i)
		job := filepath.Join(base, name)
		if err := os.Mkdir(job, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(job, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(job, uid, uid); err != nil {
			t.Fatal(err)
		}
		id, out, counts := race(name, job)
		var s, l, p int
		fmt.Sscanf(counts, "swaps=%d links=%d planted=%d", &s, &l, &p)
		swaps, links = swaps+s, links+l
		// The real dirs: otel when it is one, and the ones renamed away.
		var real []string
		if fi, err := os.Lstat(filepath.Join(job, jobdir.Otel)); err == nil && fi.IsDir() {
			real = append(real, filepath.Join(job, jobdir.Otel))
		}
		stolen, _ := filepath.Glob(filepath.Join(job, ".stolen-*"))
		real = append(real, stolen...)
		dir := ""
		for _, r := range real {
			if _, err := os.Stat(filepath.Join(r, "receipt.json")); err == nil {
				if dir != "" {
					t.Errorf("job %s: receipts in %s and %s", id, dir, r)
				}
				dir = r
			}
		}
		if dir != "" {
			held++
			var files []string
			for _, f := range []string{"metrics.jsonl", "traces.jsonl", "state.json", "collector.log"} {
				if fi, err := os.Stat(filepath.Join(dir, f)); err == nil {
					files = append(files, fmt.Sprintf("%s %d B", f, fi.Size()))
				}
			}
			t.Logf("job %s: %s; held dir %s (%d dirs renamed away): %s", id, counts, dir, len(stolen), strings.Join(files, ", "))
			if fi, err := os.Stat(filepath.Join(dir, "metrics.jsonl")); err != nil || fi.Size() == 0 {
				t.Errorf("job %s: no metrics in its held dir %s (%v)", id, dir, err)
			}
			if st, err := jobdir.ReadState(dir); err != nil || st.Status != jobdir.StatusDrained {
				t.Errorf("job %s: state.json in %s: %+v %v", id, dir, st, err)
			}
		} else {
			refused++
			t.Logf("job %s: %s; refused: %s", id, counts, firstMatch(out, "output dir"))
			if !strings.Contains(out, "owned by") && !strings.Contains(out, "whoever can write its parent could have") {
				tree, _ := run("find", job, "-printf", "%M %u %p %l\n")
				t.Errorf("job %s has no receipt and no refusal that says why:\n%s\nthe job dir:\n%s", id, out, tree)
			}
		}
	}
	if swaps+links == 0 {
		t.Fatal("the attacker never swapped a dir nor put a link: the race was not run")
	}

	// The attacker made its predictable job dir first.
	pre := filepath.Join(base, "job-predicted")
	if err := os.Mkdir(pre, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pre, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(pre, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	id, out, counts := race("job-predicted", pre)
	t.Logf("job %s (job dir made by nobody): %s; %s", id, counts, firstMatch(out, "output dir"))
	if !strings.Contains(out, "is owned by nobody (uid 65534)") {
		t.Errorf("job %s in nobody's job dir was not refused as such:\n%s", id, out)
	}
	ents, _ := os.ReadDir(pre)
	for _, e := range ents {
		if fi, err := os.Lstat(filepath.Join(pre, e.Name())); err == nil && int(fi.Sys().(*syscall.Stat_t).Uid) == uid {
			t.Errorf("job %s made %s in nobody's job dir", id, e.Name())
		}
	}

	// Nothing of any job reached the attacker's dir, and the token is in no
	// file under the test's dirs.
	var files int
	_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		files++
		inAttacker := strings.HasPrefix(p, attacker+"/")
		if owner := fi.Sys().(*syscall.Stat_t).Uid; inAttacker && owner != 65534 {
			t.Errorf("the attacker's dir got %s of uid %d", p, owner)
		}
		switch base := filepath.Base(p); {
		case inAttacker && base == "collector.yaml":
			t.Errorf("a job wrote its configuration into the attacker's dir (replaced by the attacker's)")
		case base == "leak.log" || base == "leak.jsonl":
			t.Errorf("a job's collector loaded the attacker's configuration: %s", p)
		}
		if fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(token)) {
				t.Errorf("the backend token is in %s", p)
			}
		}
		return nil
	})
	t.Logf("3 raced jobs: %d held their real dir, %d refused; the attacker swapped %d dirs and put %d links; %d files under %s, none with the token", held, refused, swaps, links, files, base)
	waitNoCollector(t)
	waitIdle(t)
}

// firstMatch is the first line of text that holds sub ("" when none).
func firstMatch(text, sub string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
