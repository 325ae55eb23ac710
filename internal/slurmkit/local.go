package slurmkit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// UpLocal brings a local cluster up with the repository's
// tests/slurm/up.sh (root is the repository) and args, its environment
// this process's plus env, and returns the variables up.sh exported
// (SLURM_CONF, GOS_SLURM_STATE, GOS_SLURM_JOBS, GOS_SLURM_USER, ...).
// The error carries up.sh's standard error.
func UpLocal(root string, env []string, args ...string) (map[string]string, error) {
	cmd := exec.Command(filepath.Join(root, "tests/slurm/up.sh"), args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("tests/slurm/up.sh %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	exports := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if kv, ok := strings.CutPrefix(line, "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			exports[k] = strings.Trim(v, `"`)
		}
	}
	return exports, nil
}

// Install copies each of files (paths below the repository root, or
// absolute) into dir as root-owned files, as make install and the RPM
// install them: gym-otel-spank and otelcol-gym execute-only (mode 0711:
// the supervisor and the collector are then not dumpable from their
// execve), everything else readable by everyone (0755: sbatch loads the
// plugin as the user).
func Install(root, dir string, files ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		mode := "0755"
		if b := filepath.Base(f); b == "gym-otel-spank" || b == "otelcol-gym" {
			mode = "0711"
		}
		src := f
		if !filepath.IsAbs(f) {
			src = filepath.Join(root, f)
		}
		if out, err := Run(nil, "install", "-m", mode, src, filepath.Join(dir, filepath.Base(f))); err != nil {
			return fmt.Errorf("install %s: %v: %s", f, err, out)
		}
	}
	return nil
}

// PlugstackLine is the plugstack.conf line that loads the plugin
// installed in dir as required, with its site.yaml and CLI beside it, its
// records in recordDir and a 30 s prolog timeout.
func PlugstackLine(dir, recordDir string) string {
	return fmt.Sprintf("required %[1]s/gym_otel.so site=%[1]s/site.yaml cli=%[1]s/gym-otel-spank record_dir=%[2]s prolog_timeout=30\n", dir, recordDir)
}

// Backend is the tests' OTLP/HTTP backend (tests/backend): a collector
// with bearer auth on 127.0.0.1:Port, its health check on HealthPort,
// writing metrics.jsonl, traces.jsonl and logs.jsonl into Dir.
type Backend struct {
	Port, HealthPort, Token, Dir string
	// Collector is the collector binary ("" for build/otelcol-gym).
	Collector string
	pid       string
}

// Start empties Dir and starts the backend (tests/backend/run.sh below
// root, which waits for its health check).
func (b *Backend) Start(root string) error {
	_ = os.RemoveAll(b.Dir)
	cmd := exec.Command(filepath.Join(root, "tests/backend/run.sh"))
	cmd.Env = append(os.Environ(), "BACKEND_PORT="+b.Port, "BACKEND_TOKEN="+b.Token,
		"BACKEND_DIR="+b.Dir, "BACKEND_HEALTH_PORT="+b.HealthPort)
	if b.Collector != "" {
		cmd.Env = append(cmd.Env, "OTELCOL="+b.Collector)
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("backend: %v", err)
	}
	b.pid = strings.TrimSpace(string(out))
	return nil
}

// Stop stops a started backend (tests/backend/stop.sh: its files are
// complete afterwards); a backend not started is left alone.
func (b *Backend) Stop(root string) {
	if b.pid != "" {
		_, _ = Run(nil, filepath.Join(root, "tests/backend/stop.sh"), b.pid)
		b.pid = ""
	}
}
