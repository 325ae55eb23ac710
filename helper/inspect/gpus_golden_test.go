package inspect

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateGPUs = flag.Bool("update-gpus", false, "rewrite the golden files of testdata/gpus")

// TestGPUFilesGolden: files the real collector wrote while scraping the
// dcgm stand-in (with --energy; with --mig for the MIG cases), a vLLM
// stand-in and Gym's stand-in (4 rollouts), with the job's GPUs as the
// prolog sees them (helper/supervise TestGPUAttribution -save-gpu-files
// writes them): the whole GPU's energy per 1,000 tokens and per rollout,
// and for MIG instances no figure. The text report and the JSON of the GPU
// and energy sections are compared with their golden files; run with
// -update-gpus to accept a change.
func TestGPUFilesGolden(t *testing.T) {
	for _, c := range []struct {
		name   string
		energy bool
	}{{"whole", true}, {"mig-uuid", false}, {"mig-exact", false}} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "gpus", c.name)
			r, err := Build(filepath.Join(dir, "otel"))
			if err != nil {
				t.Fatal(err)
			}
			if c.energy != r.Energy.Joules.Known() || c.energy != r.Energy.JoulesPer1kTokens.Known() || c.energy != r.Energy.JoulesPerRollout.Known() {
				t.Errorf("energy %+v: figure %v, want %v", r.Energy, r.Energy.Joules.Known(), c.energy)
			}
			if !c.energy && (r.Energy.Why != WhyNotAttributable || len(r.GPUSharing) == 0) {
				t.Errorf("energy %+v, sharing %q: want %q and the GPUs listed", r.Energy, r.GPUSharing, WhyNotAttributable)
			}
			if c.energy {
				// The counter's increase (mJ) against the power (W) over the
				// same window: the units agree.
				g := r.GPUs[0]
				if want := float64(g.PowerMean) * float64(r.Energy.WindowSeconds); math.Abs(float64(r.Energy.Joules)-want) > 0.15*want {
					t.Errorf("%v J from the counter, %v J from the mean power over %v s", r.Energy.Joules, want, r.Energy.WindowSeconds)
				}
			}
			var text strings.Builder
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			gpus := make([]GPU, len(r.GPUs))
			for i, g := range r.GPUs {
				g.UtilOverTime, g.PowerOverTime = nil, nil
				gpus[i] = g
			}
			js, err := json.MarshalIndent(struct {
				GPUs       []GPU    `json:"gpus"`
				GPUSharing []string `json:"gpu_sharing"`
				Energy     Energy   `json:"energy"`
			}{gpus, r.GPUSharing, r.Energy}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			for name, got := range map[string]string{"golden.txt": text.String(), "golden.json": string(js) + "\n"} {
				path := filepath.Join(dir, name)
				if *updateGPUs {
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (go test -run %s -update-gpus writes it)", err, t.Name())
				}
				if string(want) != got {
					t.Errorf("%s differs (go test -update-gpus rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
				}
			}
		})
	}
}
