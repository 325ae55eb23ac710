package receipt

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	r := &Receipt{JobID: "12", Node: "gn1", Basis: BasisFinal, Collectors: 1, Signals: map[string]Counts{
		"traces":  {Received: 10, Written: 10, Sent: 10},
		"metrics": {Received: 500, Written: 480, Sent: 480},
	}}
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("dir holds %d entries, want the receipt only", len(ents))
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != Version || got.JobID != "12" || got.Signals["metrics"].Written != 480 || !got.Complete() || got.Trouble() {
		t.Errorf("read back %+v", got)
	}
	if time.Since(got.WrittenAt) > time.Minute {
		t.Errorf("written_at %v", got.WrittenAt)
	}
	s := strings.Join(got.Summary(), "\n")
	if !strings.Contains(s, "final figures") || strings.Contains(s, "LOST") || strings.Contains(s, "logs") {
		t.Errorf("summary:\n%s", s)
	}
}

func TestReadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), FileName) {
		t.Errorf("missing: %v", err)
	}
	for body, want := range map[string]string{
		"{":                                 "not a receipt",
		`{"version":7,"basis":"final"}`:     "version 7",
		`{"version":1,"basis":"guess"}`:     `basis "guess"`,
		`{"version":1,"basis":"last_read"}`: "unknown",
		`{"version":1,"basis":"final","signals":{"spans":{}}}`:         `"spans"`,
		`{"version":1,"basis":"final","signals":{"logs":{"sent":-1}}}`: "negative",
	} {
		os.WriteFile(filepath.Join(dir, FileName), []byte(body), 0o644)
		if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), FileName) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	if err := (&Receipt{Basis: BasisNone}).Write(dir); err == nil {
		t.Error("a receipt without figures and without a word why was written")
	}
}

func TestSummarySaysLossesPlainly(t *testing.T) {
	r := &Receipt{JobID: "7", Node: "gn2", Basis: BasisLastRead, Collectors: 2,
		Unknown: []string{"the collector was killed before its drain"},
		Signals: map[string]Counts{
			"traces":  {Received: 100, Written: 100, Sent: 60, SendFailed: 30, EnqueueFailed: 10},
			"metrics": {Received: 5, Refused: 3, Written: 5, WriteFailed: 1, Sent: 5},
		}}
	if !r.Trouble() || r.Complete() {
		t.Fatal("trouble not seen")
	}
	s := strings.Join(r.Summary(), "\n")
	for _, want := range []string{
		"INCOMPLETE", "2 collector runs",
		"the backend did not get >=40 of >=100 spans (30 refused or failed to send, 10 dropped by the export queue, full while the backend lagged)",
		"receivers refused >=3 metric points",
		">=1 metric points not written to metrics.jsonl: the file system refused the writes; they are in no file",
		"but for what could not be written: `gym-otel-spank replay DIR` sends this node's files whole (they cannot tell which items were lost: the backend gets the others twice) and skips the nodes whose receipts say the backend has everything", "UNKNOWN: the collector was killed before its drain",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

// TestSummarySaysWhyNotWritten: items the file system refused are said
// with the reason the supervisor found, and the replay hint is not made
// for a run where only the files missed data.
func TestSummarySaysWhyNotWritten(t *testing.T) {
	r := &Receipt{JobID: "7", Node: "gn2", Basis: BasisFinal, Collectors: 1,
		WriteTrouble: "the file system of /j/otel was full (12 KiB free at the drain)",
		Signals: map[string]Counts{
			"traces": {Received: 100, Written: 60, WriteFailed: 40, Sent: 100},
		}}
	if !r.Trouble() {
		t.Fatal("trouble not seen")
	}
	s := strings.Join(r.Summary(), "\n")
	want := "LOST: 40 spans not written to traces.jsonl: the file system of /j/otel was full (12 KiB free at the drain); they are in no file, the backend exporter got them all the same"
	if !strings.Contains(s, want) || strings.Contains(s, "replay") {
		t.Errorf("summary:\n%s\nwant %q and no replay hint", s, want)
	}
	// Delivery from the files: the backend gets the files, so what they
	// miss it misses too; the node allowlist's points reach neither.
	r.Signals = map[string]Counts{"traces": {Received: 100, Written: 60, WriteFailed: 40},
		"metrics": {Received: 500, Written: 300, FileFiltered: 200}}
	r.Delivery = &Delivery{Items: 360, Accepted: 360, Requests: 2}
	s = strings.Join(r.Summary(), "\n")
	for _, want := range []string{
		"LOST: 40 spans not written to traces.jsonl: the file system of /j/otel was full (12 KiB free at the drain); they are in no file and so not at the backend either",
		"200 node_exporter points outside local_node_metrics were kept out of the file, and so out of the backend's copy",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("files delivery summary:\n%s\nwant %q", s, want)
		}
	}
	if strings.Contains(s, "backend exporter got them") || strings.Contains(s, "went to the backend only") {
		t.Errorf("files delivery summary speaks of a backend exporter:\n%s", s)
	}
}

// The lines appended after the collector's exit survive a write and a
// read; a listed line that names no jsonl file of the dir is refused.
func TestAppendedValidate(t *testing.T) {
	dir := t.TempDir()
	r := &Receipt{JobID: "1", Node: "n", Basis: BasisFinal, Signals: map[string]Counts{},
		Appended: []Appended{{File: "traces.jsonl", Offset: 10, Length: 20, Spans: 2}}}
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	back, err := Read(dir)
	if err != nil || len(back.Appended) != 1 || back.Appended[0] != r.Appended[0] {
		t.Fatalf("read back %+v %v", back, err)
	}
	for _, a := range []Appended{{File: "../x.jsonl", Length: 1}, {File: "traces.jsonl", Offset: -1, Length: 1}, {File: "traces.jsonl"}, {File: "traces", Length: 1},
		{File: "traces.jsonl", Length: 1, HTTPStatus: 1000}} {
		r.Appended = []Appended{a}
		if err := r.Write(dir); err == nil {
			t.Errorf("%+v taken", a)
		}
	}
}

// The summary says whether the supervisor delivered each appended line,
// and for one it did not, why and what sends it.
func TestAppendedSummary(t *testing.T) {
	r := &Receipt{JobID: "1", Node: "n", Basis: BasisFinal, Signals: map[string]Counts{},
		Appended: []Appended{{File: "traces.jsonl", Length: 1, Spans: 2, Delivered: true},
			{File: "traces.jsonl", Offset: 1, Length: 1, Spans: 2, HTTPStatus: 401, Cause: "HTTP Status Code 401"}}}
	s := strings.Join(r.Summary(), "\n")
	if !strings.Contains(s, "in traces.jsonl, delivered to the backend by the supervisor") ||
		!strings.Contains(s, "NOT delivered to the backend (HTTP Status Code 401): `gym-otel-spank replay --appended DIR` sends them") {
		t.Errorf("summary:\n%s", s)
	}
}
