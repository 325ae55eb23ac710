package supervise_test

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/inspect"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/internal/harness"
	"github.com/gym-otel-spank/gym-otel-spank/internal/otlptest"
	"github.com/gym-otel-spank/gym-otel-spank/internal/testenv"
)

// saveGPUFiles, when set, is where TestGPUAttribution copies each case's
// files (metrics.jsonl, traces.jsonl, logs.jsonl, collector.yaml,
// receipt.json) for
// helper/inspect's golden tests: <dir>/<case>/otel.
var saveGPUFiles = flag.String("save-gpu-files", "", "copy the files of TestGPUAttribution's cases under this `DIR`")

// The dcgm stand-in's UUID of GPU g (tests/standins/cmd/dcgm-standin).
func standinUUID(g int) string { return fmt.Sprintf("GPU-5fd4c1a0-0000-4000-8000-%012d", g) }

// TestGPUAttribution: the real collector scrapes the dcgm stand-in (two
// GPUs; with --mig two MIG instances each, dcgm-exporter's labels) and a
// vLLM stand-in, with the job's GPUs as the prolog would see them; Gym's
// stand-in sends 4 rollouts. The files hold exactly the job's GPUs or
// instances, each marked gpu_attribution, and `inspect` of them gives the
// energy of a whole GPU and refuses it for MIG or shared GPUs. The backend
// gets everything (the receipt says so).
func TestGPUAttribution(t *testing.T) {
	for _, c := range []struct {
		name string
		mig  bool
		args []string
		// kept: "<gpu>/<GPU_I_ID>=<gpu_attribution>" of the series kept.
		kept []string
		// energy: whether inspect gives a figure.
		energy bool
		// nvidia: a /proc/driver/nvidia stand-in whose device minors are
		// not in PCI bus order (minor 0 is the stand-in's gpu 1, on bus
		// 0x19; minor 1 its gpu 0, on 0x18): the supervisor names the
		// job's GPUs by device from it.
		nvidia bool
	}{
		// Slurm before 25.11 without MIG: SLURM_JOB_GPUS and
		// CUDA_VISIBLE_DEVICES are indexes.
		{"whole", false, []string{"--gpus", "1", "--gpu-devices", "1"}, []string{"1/=job"}, true, false},
		// The same with the driver's files: Slurm's index 0 is the GRES
		// file /dev/nvidia0, minor 0, the GPU on bus 0x19 that DCGM
		// numbers 1. Matched by index order the collector would keep
		// DCGM's gpu 0, another job's GPU.
		{"minor", false, []string{"--gpus", "0", "--gpu-devices", "0"}, []string{"1/=job"}, true, true},
		// MIG, older drivers, with the driver's files: the parent by its
		// PCI bus id, the instance by GPU_I_ID.
		{"mig-bus", true, []string{"--gpus", "3", "--gpu-devices", "MIG-" + standinUUID(1) + "/2/0"}, []string{"1/2=mig"}, false, true},
		// MIG, driver 470.42.01+: MIG UUIDs name no parent nor instance.
		{"mig-uuid", true, []string{"--gpus", "2", "--gpu-devices", "MIG-0c1d2e3f-0000-4000-8000-000000000001"},
			[]string{"0/1=shared", "0/2=shared", "1/1=shared", "1/2=shared"}, false, false},
		// MIG, older drivers: the parent's UUID and the instance ids.
		{"mig-exact", true, []string{"--gpus", "3", "--gpu-devices", "MIG-" + standinUUID(1) + "/2/0"}, []string{"1/2=mig"}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			argv := []string{testenv.Standin(t, "dcgm-standin"), "--gpus", "0,1", "--energy"}
			if c.mig {
				argv = append(argv, "--mig", "1:3g.40gb,2:3g.40gb")
			}
			port := harness.FreePort(t)
			harness.StartProc(t, "dcgm-standin", nil, append(argv, "--port", strconv.Itoa(port))...)
			harness.WaitFor(t, 10*time.Second, "dcgm-standin", func() bool { return harness.HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)) })
			tok := "gpu-token-" + harness.RandHex(4)
			be := harness.StartBackend(t, tok)
			var env []string
			if c.nvidia {
				root := t.TempDir()
				testenv.NvidiaGPU(t, root, "0000:19:00.0", 0, standinUUID(1))
				testenv.NvidiaGPU(t, root, "0000:18:00.0", 1, standinUUID(0))
				env = []string{"GYM_OTEL_NVIDIA_PROC=" + root}
			}
			s := harness.StartSup(t, harness.Job{DCGMPort: port, VLLMPort: harness.StartVLLM(t), Args: c.args, Token: tok, Endpoint: be.URL, Env: env}).MustReady(t)
			s.RunGym(t, "agent", 4, "local")
			// Three scrapes of each target after the rollouts.
			metrics := filepath.Join(s.Out, "metrics.jsonl")
			harness.WaitFor(t, harness.Patience, "3 dcgm scrapes", func() bool {
				b, _ := os.ReadFile(metrics)
				return strings.Count(string(b), "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") >= 3 && strings.Count(string(b), "vllm_generation_tokens_total") >= 3
			})
			if _, err := s.Drain(t, 30*time.Second); err != nil {
				t.Fatalf("drain: %v\n%s", err, s.Output())
			}
			s.AssertGone(t)

			m := otlptest.MustRead(t, s.Out, "metrics")
			seen := map[string]bool{}
			for _, mt := range m.Metrics {
				if !strings.HasPrefix(mt.Name, "DCGM_FI_") {
					continue
				}
				var dps []otlptest.NumberPoint
				if mt.Gauge != nil {
					dps = mt.Gauge.DataPoints
				}
				if mt.Sum != nil {
					dps = append(dps, mt.Sum.DataPoints...)
				}
				for _, dp := range dps {
					gpu, _ := dp.Attributes.Str("gpu")
					gi, _ := dp.Attributes.Str("GPU_I_ID")
					at, _ := dp.Attributes.Str("gpu_attribution")
					seen[gpu+"/"+gi+"="+at] = true
				}
			}
			// The energy counter of the kept series (mJ), for the MIG
			// estimate: its first and last values.
			var mjFirst, mjLast float64
			for _, mt := range m.Metrics {
				if mt.Name != "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" || mt.Sum == nil {
					continue
				}
				for _, dp := range mt.Sum.DataPoints {
					if v := dp.Value(); mjFirst == 0 || v < mjFirst {
						mjFirst = v
					}
					mjLast = max(mjLast, dp.Value())
				}
			}
			var got []string
			for k := range seen {
				got = append(got, k)
			}
			sort.Strings(got)
			if strings.Join(got, " ") != strings.Join(c.kept, " ") {
				t.Errorf("dcgm series kept %q, want %q", got, c.kept)
			}

			be.Stop(t)
			r, err := inspect.Build(s.Out)
			if err != nil {
				t.Fatal(err)
			}
			st, err := jobdir.ReadState(s.Out)
			if err != nil {
				t.Fatal(err)
			}
			if c.nvidia {
				// state.json names the job's GPU by device, and inspect
				// matched the series by pci_bus_id.
				if len(st.GPUs) != 1 || st.GPUs[0].PCIBusID != "00000000:19:00.0" || st.GPUs[0].Minor != 0 {
					t.Errorf("state.json gpus %+v, want the GPU of minor 0 on bus 00000000:19:00.0", st.GPUs)
				}
				m := r.EnergyMatching
				if m.By != "pci_bus_id" || len(m.Nodes) != 1 || m.Nodes[0].KeptBy != inspect.KeptByPCI || !strings.Contains(m.Note, "every GPU matched by device") {
					t.Errorf("energy matching %+v, want by pci_bus_id on every node", m)
				}
			} else if len(st.GPUs) != 0 {
				t.Errorf("state.json gpus %+v without the driver's files", st.GPUs)
			}
			e := r.Energy
			var text strings.Builder
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if c.energy {
				if !e.Joules.Known() || e.Joules <= 0 || e.Source != inspect.SourceEnergyCounter || e.GPUs != 1 ||
					!e.JoulesPer1kTokens.Known() || !e.JoulesPerRollout.Known() || e.Rollouts != 4 || len(r.GPUSharing) > 0 {
					t.Errorf("energy %+v, sharing %q: want a figure from the energy counter of one GPU, per token and per rollout (4)", e, r.GPUSharing)
				}
				// The stand-in adds the power it serves times the
				// wall-clock time between scrapes: the counter's increase
				// is within its power range (120.5 to 620.5 W) times the window.
				if w := float64(e.WindowSeconds); float64(e.Joules) < 120*w*0.5 || float64(e.Joules) > 621*w*1.5 {
					t.Errorf("%v J over %v s: outside the stand-in's power range", e.Joules, w)
				}
			} else {
				if e.Joules.Known() || e.JoulesPer1kTokens.Known() || e.Why != inspect.WhyNotAttributable || len(r.GPUSharing) != len(c.kept) {
					t.Errorf("energy %+v, sharing %q: want no figure and %d GPUs listed", e, r.GPUSharing, len(c.kept))
				}
				if !strings.Contains(text.String(), "cannot be attributed to the job") {
					t.Errorf("text does not say the energy cannot be attributed:\n%s", text.String())
				}
			}
			// The job's own MIG instance (3g.40gb): an estimate beside the
			// refusal, the parent's counter increase times 3/7; none where
			// the instances cannot be told apart.
			if x := e.Estimate; c.mig && c.name != "mig-uuid" {
				want := (mjLast - mjFirst) / 1000 * 3 / 7
				if x == nil || want <= 0 || math.Abs(float64(x.Joules)-want) > 1e-6*want || !strings.HasPrefix(x.Method, inspect.MethodMIGShare) ||
					!strings.Contains(text.String(), "AN ESTIMATE") {
					t.Errorf("MIG estimate %+v, want %v J (the parent's %v mJ increase x 3/7), labelled", x, want, mjLast-mjFirst)
				} else {
					t.Logf("MIG estimate %.1f J = %.1f J x 3/7", float64(x.Joules), (mjLast-mjFirst)/1000)
				}
			} else if x != nil {
				t.Errorf("estimate %+v, want none", x)
			}
			if len(r.Trouble) > 0 || !r.Summary.DeliveryOK {
				t.Errorf("trouble %q, delivery %q", r.Trouble, r.Summary.Delivery)
			}
			t.Logf("inspect:\n%s", text.String())
			if *saveGPUFiles != "" {
				dst := filepath.Join(*saveGPUFiles, c.name, "otel")
				if err := os.MkdirAll(dst, 0o755); err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{"metrics.jsonl", "traces.jsonl", "logs.jsonl", "collector.yaml", "receipt.json"} {
					b, err := os.ReadFile(filepath.Join(s.Out, f))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}
