package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gym-otel-spank/gym-otel-spank/helper/proc"
)

// ownStarts gathers the collector's own start without Slurm
// (collectorOwnStart) through a P2 run: a few runs after each round's
// one-node flagged job, with that job's collector.yaml, so that the row
// it makes is the host's in the same minutes as the jobs' (a host's speed
// drifts within a run; docs/performance.md, P2). err is the first
// failure; samples taken before it stand.
type ownStarts struct {
	wall, cpu []float64 // ms
	err       error
}

// add runs the collector of job id's collector.yaml runs times by hand.
func (o *ownStarts) add(id string, runs int) {
	wall, cpu, err := collectorOwnStart(filepath.Join(jobOtelDir(id), "collector.yaml"), runs)
	if err != nil {
		if o.err == nil {
			o.err = err
		}
		return
	}
	o.wall, o.cpu = append(o.wall, wall...), append(o.cpu, cpu...)
}

// hostRows are P2's rows of what this host costs whatever the product does:
// the collector's own start without Slurm (own: the flagged jobs'
// collector.yaml, run by hand through the run, median), and a page's first
// touch. They tell a P2 missed by the product from one missed by a slower
// host: the collector's start is part of every flagged job's prolog. ownMs
// is the collector's own start's median, ms (0: not measured).
func hostRows(own ownStarts) (rows []Row, ownMs float64) {
	wall, cpu := own.wall, own.cpu
	var err error
	if len(wall) == 0 {
		err = own.err
		if err == nil {
			err = fmt.Errorf("no one-node flagged job")
		}
	}
	start := Row{ID: "P2", What: "host: the collector's own start, no Slurm: exec to healthy with the one-node flagged jobs' collector.yaml, run by hand after each round's (its CPU, user+sys)",
		Target: "-", Met: "-"}
	if err != nil {
		start.Figure = "not measured: " + err.Error()
	} else {
		if own.err != nil { // a run failed after others measured
			start.Spread = "some runs failed: " + own.err.Error() + "; "
		}
		lo, hi := minmax(wall)
		ownMs = median(wall)
		start.Figure = fmt.Sprintf("%.0f ms (CPU %.0f ms)", median(wall), median(cpu))
		start.Spread += fmt.Sprintf("%d runs, %.0f-%.0f ms", len(wall), lo, hi)
	}
	us, err := firstTouch(16<<20, 3)
	touch := Row{ID: "P2", What: "host: a page's first touch (16 MiB of new anonymous memory, page by page)", Target: "-", Met: "-"}
	if err != nil {
		touch.Figure = "not measured: " + err.Error()
	} else {
		lo, hi := minmax(us)
		touch.Figure = fmt.Sprintf("%.1f us per page", median(us))
		touch.Spread = fmt.Sprintf("%d runs, %.1f-%.1f us", len(us), lo, hi)
	}
	return []Row{start, touch}, ownMs
}

// collectorOwnStart runs build/otelcol-gym runs times with a copy of the
// collector configuration cfg (its jsonl paths moved to a temporary
// directory, its ports as rendered: the job has ended) and returns each
// run's wall time from exec to a 200 from its health check, and its CPU
// time (user+sys) by then, in ms.
func collectorOwnStart(cfg string, runs int) (wall, cpu []float64, err error) {
	data, err := os.ReadFile(cfg)
	if err != nil {
		return nil, nil, err
	}
	var doc struct {
		Extensions struct {
			HealthCheck struct {
				Endpoint string `yaml:"endpoint"`
			} `yaml:"health_check"`
		} `yaml:"extensions"`
		Exporters map[string]struct {
			Path string `yaml:"path"`
		} `yaml:"exporters"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", cfg, err)
	}
	if doc.Extensions.HealthCheck.Endpoint == "" {
		return nil, nil, fmt.Errorf("%s: no extensions.health_check.endpoint", cfg)
	}
	tmp, err := os.MkdirTemp("", "bench-collector-start")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	text := string(data)
	for _, e := range doc.Exporters {
		if e.Path != "" {
			text = strings.ReplaceAll(text, e.Path, filepath.Join(tmp, filepath.Base(e.Path)))
		}
	}
	own := filepath.Join(tmp, "collector.yaml")
	if err := os.WriteFile(own, []byte(text), 0o600); err != nil {
		return nil, nil, err
	}
	url := "http://" + doc.Extensions.HealthCheck.Endpoint + "/"
	client := &http.Client{Timeout: time.Second}
	for i := 0; i < runs; i++ {
		cmd := exec.Command(filepath.Join(repo, "build/otelcol-gym"), "--config", own)
		// Every token the rendered configuration names (the backend's,
		// the receivers', the plugin's own receiver's): an unset one is
		// refused at the start.
		cmd.Env = []string{"OTEL_TOKEN=bench", "GYM_OTEL_RECEIVER_TOKEN=bench", "GYM_OTEL_PLUGIN_TOKEN=bench", "GOMEMLIMIT=409MiB", "PATH=/usr/bin:/bin"}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		healthy := false
		for deadline := t0.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if resp, err := client.Get(url); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					healthy = true
					break
				}
			}
		}
		took := time.Since(t0)
		st, terr := proc.ReadStat(cmd.Process.Pid)
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if !healthy {
			return nil, nil, fmt.Errorf("the collector was not healthy within 10 s (%s; run it by hand to see why)", cfg)
		}
		if terr != nil {
			return nil, nil, terr
		}
		wall = append(wall, float64(took.Microseconds())/1000)
		cpu = append(cpu, float64(st.UTime+st.STime)*1000/100) // USER_HZ is 100 on Linux
		time.Sleep(200 * time.Millisecond)
	}
	return wall, cpu, nil
}

// firstTouch maps size bytes of new anonymous memory runs times, writes
// one byte per 4 KiB page, and returns each run's time per page in us.
func firstTouch(size, runs int) ([]float64, error) {
	var out []float64
	for i := 0; i < runs; i++ {
		b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		took := time.Since(t0)
		syscall.Munmap(b)
		out = append(out, float64(took.Nanoseconds())/1000/float64(size/4096))
	}
	return out, nil
}
