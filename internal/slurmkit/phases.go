package slurmkit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gym-otel-spank/gym-otel-spank/helper/contract"
	"github.com/gym-otel-spank/gym-otel-spank/helper/vocab"
)

// PhaseSpan is one slurm.* span of a node's traces.jsonl (the job's Slurm
// phases), with its resource.
type PhaseSpan struct {
	// Trace, ID and Parent are the span's trace id, span id and parent
	// span id, in hex ("" for no parent).
	Trace, ID, Parent, Name string
	// Start and End are the span's times.
	Start, End time.Time
	// Attrs and Resource are the span's and its resource's attributes,
	// as text (ints in decimal, booleans "true"/"false").
	Attrs, Resource map[string]string
	// Status is the error's message ("" when none); Error is a status
	// code of error.
	Status string
	Error  bool
}

// PhaseSpans reads the slurm.* spans of traces.jsonl in dir (a node's otel
// directory), in file order; an unreadable file or a line that is not
// OTLP-JSON fails the test.
func PhaseSpans(t testing.TB, dir string) []PhaseSpan {
	t.Helper()
	type kv struct {
		Key   string `json:"key"`
		Value struct {
			S string `json:"stringValue"`
			I string `json:"intValue"`
			B *bool  `json:"boolValue"`
		} `json:"value"`
	}
	attrs := func(as []kv) map[string]string {
		m := map[string]string{}
		for _, a := range as {
			m[a.Key] = a.Value.S + a.Value.I
			if a.Value.B != nil {
				m[a.Key] = strconv.FormatBool(*a.Value.B)
			}
		}
		return m
	}
	var line struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []kv `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Spans []struct {
					TraceID string `json:"traceId"`
					SpanID  string `json:"spanId"`
					Parent  string `json:"parentSpanId"`
					Name    string `json:"name"`
					Start   string `json:"startTimeUnixNano"`
					End     string `json:"endTimeUnixNano"`
					Attrs   []kv   `json:"attributes"`
					Status  struct {
						Message string `json:"message"`
						Code    int    `json:"code"`
					} `json:"status"`
				} `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	f, err := os.Open(filepath.Join(dir, "traces.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ns := func(s string) time.Time { n, _ := strconv.ParseInt(s, 10, 64); return time.Unix(0, n) }
	var out []PhaseSpan
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line.ResourceSpans = nil
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("traces.jsonl: %v", err)
		}
		for _, rs := range line.ResourceSpans {
			res := attrs(rs.Resource.Attributes)
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if !strings.HasPrefix(s.Name, "slurm.") {
						continue
					}
					out = append(out, PhaseSpan{Trace: s.TraceID, ID: s.SpanID, Parent: s.Parent, Name: s.Name,
						Start: ns(s.Start), End: ns(s.End), Attrs: attrs(s.Attrs), Resource: res,
						Status: s.Status.Message, Error: s.Status.Code == 2})
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("traces.jsonl: %v", err)
	}
	return out
}

// NodePhases is what one node's phase spans of one job should be.
type NodePhases struct {
	// Node is the node's name (host.name of every span's resource).
	Node string
	// Identity are resource attributes every span carries (slurm_job_id,
	// run_id, nv.dl.job.uuid, ...).
	Identity map[string]string
	// Steps are the numbered steps that ran on the node, by step id
	// ("0", "1"), with the exit code each must show.
	Steps map[string]int
	// Batch is whether the node ran the batch step (the batch script and
	// the final wait are its two parts).
	Batch bool
}

// NodeSpans is one node's phase spans, checked: the job's span, the step
// spans by step id, and the spans by name.
type NodeSpans struct {
	Job    PhaseSpan
	Steps  map[string]PhaseSpan
	ByName map[string][]PhaseSpan
}

// CheckNodePhases asserts one node's phase spans of a job that ended by
// itself: one slurm.job root and one slurm.prolog under it; a slurm.step
// under it per step of want.Steps (each with its exit code, an error
// status for a non-zero one) and for the batch step on the batch node,
// with slurm.batch_script and slurm.final_wait as the batch step's two
// parts and the numbered steps inside the batch script; every span in one
// trace with the node's name, want.Identity and the plugin's mark
// (contract.SourceKey) on its resource, inside the
// job's span except the drain and the epilog, which follow it under the
// job's span with the same resource, the drain begun by the epilog and
// its end known. It logs the spans and returns them.
func CheckNodePhases(t testing.TB, spans []PhaseSpan, want NodePhases) NodeSpans {
	t.Helper()
	ns := NodeSpans{Steps: map[string]PhaseSpan{}, ByName: map[string][]PhaseSpan{}}
	for _, s := range spans {
		ns.ByName[s.Name] = append(ns.ByName[s.Name], s)
		if s.Name == vocab.SpanStep {
			ns.Steps[s.Attrs[vocab.AttrStepID]] = s
		}
		t.Logf("%s: %-20s step=%-6s %s .. %s (%v) exit=%s signal=%s end_known=%s %s", want.Node, s.Name, s.Attrs[vocab.AttrStepID],
			s.Start.Format("15:04:05.000"), s.End.Format("15:04:05.000"), s.End.Sub(s.Start).Round(time.Millisecond),
			s.Attrs[vocab.AttrStepExitCode], s.Attrs[vocab.AttrStepSignal], s.Attrs[vocab.AttrEndKnown], s.Status)
	}
	counts := map[string]int{vocab.SpanJob: 1, vocab.SpanProlog: 1, vocab.SpanDrain: 1, vocab.SpanEpilog: 1}
	if want.Batch {
		counts[vocab.SpanBatchScript], counts[vocab.SpanFinalWait] = 1, 1
	} else {
		counts[vocab.SpanBatchScript], counts[vocab.SpanFinalWait] = 0, 0
	}
	for name, n := range counts {
		if len(ns.ByName[name]) != n {
			t.Fatalf("%s: %d %s spans, want %d", want.Node, len(ns.ByName[name]), name, n)
		}
	}
	root := ns.ByName[vocab.SpanJob][0]
	ns.Job = root
	for _, s := range spans {
		if s.Trace != root.Trace {
			t.Errorf("%s: %s: trace %s, the job's is %s", want.Node, s.Name, s.Trace, root.Trace)
		}
		if s.Resource["host.name"] != want.Node || s.Attrs[vocab.AttrNode] != want.Node {
			t.Errorf("%s: %s: host.name %q slurm.node %q", want.Node, s.Name, s.Resource["host.name"], s.Attrs[vocab.AttrNode])
		}
		if s.Resource[contract.SourceKey] != contract.SourceSlurm {
			t.Errorf("%s: %s: resource %s=%q, want %q: the plugin's own receiver's mark", want.Node, s.Name, contract.SourceKey, s.Resource[contract.SourceKey], contract.SourceSlurm)
		}
		if s.Resource[contract.EmitterKey] != contract.EmitterPhases {
			t.Errorf("%s: %s: resource %s=%q, want %q: what tells the phase spans from Lens' reckoner's", want.Node, s.Name, contract.EmitterKey, s.Resource[contract.EmitterKey], contract.EmitterPhases)
		}
		for k, v := range want.Identity {
			if s.Resource[k] != v {
				t.Errorf("%s: %s: resource %s=%q, want %q", want.Node, s.Name, k, s.Resource[k], v)
			}
		}
		if s.Name == vocab.SpanDrain || s.Name == vocab.SpanEpilog {
			if s.Parent != root.ID || fmt.Sprint(s.Resource) != fmt.Sprint(root.Resource) {
				t.Errorf("%s: %s: parent %s, resource %v; want the job's span %s and its resource %v", want.Node, s.Name, s.Parent, s.Resource, root.ID, root.Resource)
			}
			continue
		}
		if s.End.Before(s.Start) || s.Start.Before(root.Start) || s.End.After(root.End) {
			t.Errorf("%s: %s (%v .. %v) not inside the job's span (%v .. %v)", want.Node, s.Name, s.Start, s.End, root.Start, root.End)
		}
	}
	if pr := ns.ByName[vocab.SpanProlog][0]; pr.Parent != root.ID || pr.Attrs[vocab.AttrStartKnown] != "true" {
		t.Errorf("%s: prolog parent %s start_known %q, want the job's span %s and its start known", want.Node, pr.Parent, pr.Attrs[vocab.AttrStartKnown], root.ID)
	}
	ids := []string{}
	for id := range want.Steps {
		ids = append(ids, id)
	}
	if want.Batch {
		ids = append(ids, "batch")
	}
	for _, id := range ids {
		s, ok := ns.Steps[id]
		if !ok {
			t.Errorf("%s: no span of step %s (steps: %v)", want.Node, id, keys(ns.Steps))
			continue
		}
		if s.Parent != root.ID {
			t.Errorf("%s: step %s: parent %s, not the job's span %s", want.Node, id, s.Parent, root.ID)
		}
		code := want.Steps[id] // batch: 0
		if s.Attrs[vocab.AttrStepExitCode] != strconv.Itoa(code) || s.Error != (code != 0) {
			t.Errorf("%s: step %s: exit code %q (error %v), want %d", want.Node, id, s.Attrs[vocab.AttrStepExitCode], s.Error, code)
		}
	}
	if want.Batch {
		b := ns.Steps["batch"]
		bs, fw := ns.ByName[vocab.SpanBatchScript][0], ns.ByName[vocab.SpanFinalWait][0]
		if bs.Parent != b.ID || fw.Parent != b.ID || !fw.Start.Equal(bs.End) {
			t.Errorf("%s: the batch script and the final wait are not the batch step's two parts", want.Node)
		}
		// A step's span ends when its slurmstepd runs the plugin's exit
		// callback, which can come a few ms after srun returned to the
		// script, and so after the script's end when srun is its last
		// command: a second of slack for that teardown.
		for id := range want.Steps {
			if s := ns.Steps[id]; s.Start.Before(bs.Start) || s.End.After(bs.End.Add(stepTeardownSlack)) {
				t.Errorf("%s: step %s (%v .. %v) outside the batch script (%v .. %v)", want.Node, id, s.Start, s.End, bs.Start, bs.End)
			}
		}
	}
	dr, ep := ns.ByName[vocab.SpanDrain][0], ns.ByName[vocab.SpanEpilog][0]
	if dr.Attrs[vocab.AttrEndKnown] != "true" || !strings.HasPrefix(dr.Attrs[vocab.AttrDrainCause], "epilog") || dr.Start.After(root.End) || dr.End.Before(root.End) {
		t.Errorf("%s: drain %v .. %v %v: want begun by the epilog, its end known, around the job span's end %v", want.Node, dr.Start, dr.End, dr.Attrs, root.End)
	}
	if ep.Attrs[vocab.AttrStartKnown] != "true" || ep.Start.After(dr.Start) {
		t.Errorf("%s: epilog %v .. %v %v: want its start known, before the drain's %v", want.Node, ep.Start, ep.End, ep.Attrs, dr.Start)
	}
	return ns
}

// stepTeardownSlack is how long after the batch script's end a step's
// span may end (its slurmstepd's teardown after srun returned).
const stepTeardownSlack = time.Second

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
