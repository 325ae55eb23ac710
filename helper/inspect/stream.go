package inspect

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"

	json "github.com/goccy/go-json"

	"github.com/gym-otel-spank/gym-otel-spank/helper/jobdir"
	"github.com/gym-otel-spank/gym-otel-spank/helper/slurm"
)

// Source is one node directory of a job: the first node's otel/ dir, an
// otel/nodes/<node>/ dir, or either of them under otel/links/<job id>/ (a
// later link of a chain).
type Source struct {
	// Dir is the directory.
	Dir string `json:"dir"`
	// Node is the node the directory is named for (nodes/<node>); empty for
	// the first node's dir, whose node comes from the host.name its
	// resources carry.
	Node string `json:"node,omitempty"`
	// Link is the job id of the chain link (links/<job id>); empty for the
	// job itself.
	Link string `json:"link,omitempty"`
}

// Sources returns the node directories of the job whose otel/ dir is dir
// (a job dir with an otel/ subdir is taken as its otel/ dir): dir itself,
// then each nodes/<node>/, then each later link of a chain
// (links/<job id>/) with its nodes, the nodes in natural order.
func Sources(dir string) []Source {
	nodes, _ := jobdir.NodeDirs(jobdir.OtelDir(dir), nil)
	out := make([]Source, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, Source{Dir: n.Path, Node: n.Node, Link: n.Link})
	}
	// Each run of nodes/<node> dirs in the nodes' natural order (gn2
	// before gn10), after the dir of the run's first node.
	isNode := func(s Source) bool { return filepath.Base(filepath.Dir(s.Dir)) == "nodes" }
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && isNode(out[j]) && out[j].Link == out[i].Link {
			j++
		}
		if j > i {
			run := out[i:j]
			sort.SliceStable(run, func(a, b int) bool { return slurm.NaturalLess(run[a].Node, run[b].Node) })
			i = j
		} else {
			i++
		}
	}
	return out
}

// signals are the files of a node dir, in reading order.
var signals = []string{"metrics", "traces", "logs"}

// maxLine bounds one line (one exporter batch): a longer line is counted
// as not parsed and skipped.
const maxLine = 256 << 20

// decoded is one line's parse result.
type decoded struct {
	line *otlpLine
	err  error
	// unterminated is the byte count of a last line without its newline
	// (0 for every other line): a collector may be writing it.
	unterminated int
}

// readFile streams the lines of one jsonl file through a pool of decoders
// and hands each decoded line to fn in file order, so per-series points
// keep their order. A line that does not parse is passed with its error.
// Memory is bounded by the lines in flight (twice the decoders).
func readFile(path string, fn func(d decoded)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	workers := runtime.GOMAXPROCS(0)
	if workers > 4 {
		workers = 4
	}
	type job struct {
		data         []byte
		unterminated int
		out          chan decoded
	}
	jobs := make(chan job, workers)
	order := make(chan chan decoded, 2*workers)
	for i := 0; i < workers; i++ {
		go func() {
			for j := range jobs {
				l := &otlpLine{}
				err := json.Unmarshal(j.data, l)
				j.out <- decoded{line: l, err: err, unterminated: j.unterminated}
			}
		}()
	}
	readErr := make(chan error, 1)
	go func() {
		defer close(order)
		defer close(jobs)
		r := bufio.NewReaderSize(f, 1<<20)
		for {
			data, long, err := readLine(r)
			if len(data) > 0 || long {
				out := make(chan decoded, 1)
				order <- out
				if long {
					out <- decoded{err: fmt.Errorf("line longer than %d bytes", maxLine)}
				} else {
					// readLine ends a line at its newline; at EOF
					// without one, the line has none.
					n := 0
					if errors.Is(err, io.EOF) {
						n = len(data)
					}
					jobs <- job{data, n, out}
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				readErr <- err
				return
			}
		}
	}()
	for out := range order {
		fn(<-out)
	}
	return <-readErr
}

// readLine returns the next line without its newline (a fresh slice), or
// long for a line over maxLine (skipped to its end).
func readLine(r *bufio.Reader) (line []byte, long bool, err error) {
	var buf []byte
	for {
		var chunk []byte
		chunk, err = r.ReadSlice('\n')
		if len(buf)+len(chunk) > maxLine {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			return nil, true, err
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if n := len(buf); n > 0 && buf[n-1] == '\n' {
			buf = buf[:n-1]
		}
		return buf, false, err
	}
}
