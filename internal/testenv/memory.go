package testenv

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Mem is one sample of a process's resident memory, in KiB, from
// /proc/<pid>/status (VmRSS, RssAnon, RssFile) and /proc/<pid>/smaps_rollup
// (Pss; 0 when unreadable).
type Mem struct {
	RSS, PSS, Anon, File float64
}

// ReadMem samples pid's memory. Errors are those of reading
// /proc/<pid>/status (the process is gone, or not ours to read).
func ReadMem(pid int) (Mem, error) {
	var m Mem
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	for _, l := range strings.Split(string(st), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			m.RSS = v
		case "RssAnon:":
			m.Anon = v
		case "RssFile:":
			m.File = v
		}
	}
	if sm, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
		for _, l := range strings.Split(string(sm), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
				m.PSS, _ = strconv.ParseFloat(f[1], 64)
			}
		}
	}
	return m, nil
}

// cgroupRoot is where the cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// GroupCharge is what the memory controller charges to pid's control group,
// in KiB, and the group's directory: memory.current of its cgroup v2 group
// (at the mount or under "unified") when that group has one, else
// memory.usage_in_bytes of its cgroup v1 memory group. Both count the
// group's anonymous memory, the page cache the group first brought in
// (a page stays charged to the group that first read it, whoever maps it
// later) and kernel memory, of every process in the group and below.
// Errors: pid is gone, or no memory group of it has a readable charge.
func GroupCharge(pid int) (float64, string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return 0, "", err
	}
	var cands [][2]string // directory, charge file
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			for _, m := range []string{cgroupRoot, filepath.Join(cgroupRoot, "unified")} {
				cands = append(cands, [2]string{filepath.Join(m, f[2]), "memory.current"})
			}
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			cands = append(cands, [2]string{filepath.Join(cgroupRoot, "memory", f[2]), "memory.usage_in_bytes"})
		}
	}
	for _, c := range cands {
		if v, err := ReadCharge(c[0], c[1]); err == nil {
			return v, c[0], nil
		}
	}
	return 0, "", fmt.Errorf("pid %d: no memory charge in its groups (%s)", pid, strings.TrimSpace(string(b)))
}

// ReadCharge reads a group's charge file (memory.current or
// memory.usage_in_bytes: bytes) in dir and returns KiB.
func ReadCharge(dir, file string) (float64, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q: %v", filepath.Join(dir, file), b, err)
	}
	return v / 1024, nil
}

// Segments is the resident part, in KiB, of each mapping of the file exe
// in pid's address space (/proc/<pid>/smaps), in address order: for a Go
// binary its text, its read-only data (.rodata, .gopclntab) and its data
// (whose written pages are private copies, counted here too).
func Segments(pid int, exe string) ([]float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	var out []float64
	mine := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			mine = len(f) >= 6 && f[5] == exe
		case mine && len(f) >= 2 && f[0] == "Rss:":
			v, _ := strconv.ParseFloat(f[1], 64)
			out = append(out, v)
		}
	}
	return out, nil
}

// MemorySummary is one run of helper/supervise's TestMeasureMemory (an idle
// collector scraping a vLLM stand-in and node_exporter, issue 29's P4) as
// `make bench` (tests/bench, P4) reads it: the variant run (configuration,
// environment, binary), the medians of its samples in MiB, and the
// binary's size in MiB. The test prints it with Line, the bench reads it
// with ParseMemoryLine.
type MemorySummary struct {
	Variant string  `json:"variant"`
	Binary  string  `json:"binary"`
	Size    float64 `json:"binary_mib"`
	Round   int     `json:"round"`
	Samples int     `json:"samples"`
	RSS     float64 `json:"rss_mib"`
	PSS     float64 `json:"pss_mib"`
	File    float64 `json:"file_mib"`
	Anon    float64 `json:"anon_mib"`
	MaxRSS  float64 `json:"max_rss_mib"`
	// Group is the median charge of the run's own memory control group
	// (GroupCharge's files: the collector alone in it) in MiB; 0 when the
	// run had no group of its own.
	Group float64 `json:"group_mib,omitempty"`
	// Segments is the binary's resident pages per mapping at the last
	// sample (Segments), in MiB.
	Segments []float64 `json:"segments_mib,omitempty"`
	// LoadRate is the spans/s achieved under the optional load that
	// follows the idle samples (0: none); LoadCPU the collector's CPU
	// seconds under it, LoadMaxRSS and LoadMaxAnon its highest VmRSS and
	// RssAnon in MiB.
	LoadRate    float64 `json:"load_rate,omitempty"`
	LoadCPU     float64 `json:"load_cpu_s,omitempty"`
	LoadMaxRSS  float64 `json:"load_max_rss_mib,omitempty"`
	LoadMaxAnon float64 `json:"load_max_anon_mib,omitempty"`
}

// memoryPrefix starts the line of a MemorySummary in the test's output.
const memoryPrefix = "memory-json: "

// Line is s as one line of the test's output: "memory-json: <JSON>".
func (s MemorySummary) Line() string {
	b, _ := json.Marshal(s)
	return memoryPrefix + string(b)
}

// ParseMemoryLine reads the MemorySummary of a Line found anywhere in
// line; ok is false for any other line.
func ParseMemoryLine(line string) (s MemorySummary, ok bool) {
	_, js, found := strings.Cut(line, memoryPrefix)
	if !found || json.Unmarshal([]byte(js), &s) != nil {
		return MemorySummary{}, false
	}
	return s, true
}
