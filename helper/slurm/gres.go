package slurm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// GresGPUs is the node's GPU device files as its slurmd indexes them: the
// GRES index i (SLURM_JOB_GPUS holds these) is Files[i].
//
// How slurmd orders them (Slurm 22.05.8; at Slurm's head, commit
// 284c3b9, the records are appended the same way in src/interfaces/gres.c
// and numbered in its gres_node_config_load, _foreach_fill_in_gres_devices):
// gres_g_node_config_load (src/common/gres.c) parses gres.conf with
// s_p_parse_file and appends first every record of a line that starts with
// Name= (global), then every record of a line that starts with NodeName=,
// each group in file order; a NodeName= line whose hostlist does not hold
// the node is skipped (_parse_gres_config_node, hostlist_find). Without
// AutoDetect the gpu plugin (src/plugins/gres/gpu/gres_gpu.c,
// gres_p_node_config_load) hands that list unsorted to
// common_node_config_load (src/plugins/gres/common/gres_common.c), which
// expands each record's File= with hostlist_create, in the order written,
// and numbers the files from 0 (index++). With AutoDetect the list is
// merged with the detected GPUs and sorted (_merge_system_gres_conf:
// _sort_gpu_by_file, then _sort_gpu_by_links_order): that order is the
// GPU library's and is not read here.
type GresGPUs struct {
	// Path is the gres.conf read.
	Path string
	// Files are the node's GPU device files in GRES index order.
	Files []string
}

// ErrGresOrderUnknown wraps every reason ReadGresGPUs cannot tell the
// order of the node's GPU files (AutoDetect, an Include, a gpu line
// without File=, MultipleFiles=, no gpu line for the node).
var ErrGresOrderUnknown = errors.New("GRES index order not known from gres.conf")

// GresConfPath is the gres.conf beside the slurm.conf at slurmConf (Slurm's
// get_extra_conf_path): "" when slurmConf is "".
func GresConfPath(slurmConf string) string {
	if slurmConf == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(filepath.Clean(slurmConf)), "gres.conf")
}

// ReadGresGPUs reads the node's GPU files from the gres.conf at path
// (bounded to ConfMax bytes; Include lines are not followed). Errors: the
// file's, or ErrGresOrderUnknown wrapped with the reason.
func ReadGresGPUs(path, node string) (GresGPUs, error) {
	f, err := os.Open(filepath.Clean(path))
	if err != nil {
		return GresGPUs{}, err
	}
	defer f.Close()
	files, err := parseGresGPUs(io.LimitReader(f, ConfMax), node)
	if err != nil {
		return GresGPUs{}, fmt.Errorf("%s: %w", path, err)
	}
	return GresGPUs{Path: path, Files: files}, nil
}

// gresLine is one gres.conf record: its keys lower-cased, last value each.
type gresLine struct {
	first string // the line's first key, lower-cased
	kv    map[string]string
}

// parseGresGPUs reads gres.conf lines as Slurm's parser does (comments
// and key=value pairs as ReadConf, keys case-insensitive) and returns the
// node's gpu files in index order.
func parseGresGPUs(r io.Reader, node string) ([]string, error) {
	var global, local []gresLine
	globalAuto := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), ConfMax)
	for sc.Scan() {
		line := strings.TrimSpace(stripConfComment(sc.Text()))
		if line == "" {
			continue
		}
		if w, _, _ := strings.Cut(line, " "); strings.EqualFold(w, "include") {
			return nil, fmt.Errorf("%w: an Include line (%q): the included file is not read", ErrGresOrderUnknown, line)
		}
		l := gresLine{kv: map[string]string{}}
		rest := line
		for {
			m := confKeyValue().FindStringSubmatchIndex(rest)
			if m == nil {
				break
			}
			k := strings.ToLower(rest[m[2]:m[3]])
			v := ""
			if m[4] >= 0 {
				v = rest[m[4]:m[5]]
			} else {
				v = rest[m[6]:m[7]]
			}
			if l.first == "" {
				l.first = k
			}
			l.kv[k] = v
			rest = rest[m[1]:]
		}
		if strings.TrimSpace(rest) != "" {
			return nil, fmt.Errorf("%w: a line not read as key=value (%q)", ErrGresOrderUnknown, line)
		}
		switch l.first {
		case "nodename":
			hosts, err := ExpandHostlist(l.kv["nodename"])
			if err != nil {
				return nil, fmt.Errorf("%w: NodeName=%s: %v", ErrGresOrderUnknown, l.kv["nodename"], err)
			}
			for _, h := range hosts {
				if h == node {
					local = append(local, l)
					break
				}
			}
		case "name":
			global = append(global, l)
		case "autodetect":
			globalAuto = l.kv["autodetect"]
		default:
			return nil, fmt.Errorf("%w: a line starting with %q", ErrGresOrderUnknown, l.first)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// A node's own AutoDetect (on a NodeName= line) overrides the global
	// one (_handle_local_autodetect, _handle_global_autodetect).
	auto := globalAuto
	for _, l := range local {
		if v, ok := l.kv["autodetect"]; ok {
			auto = v
		}
	}
	if auto != "" && !strings.EqualFold(auto, "off") {
		return nil, fmt.Errorf("%w: AutoDetect=%s (the GPU library's order)", ErrGresOrderUnknown, auto)
	}
	var files []string
	for _, l := range append(global, local...) {
		if !strings.EqualFold(l.kv["name"], "gpu") {
			continue
		}
		if _, ok := l.kv["multiplefiles"]; ok {
			return nil, fmt.Errorf("%w: a gpu line with MultipleFiles=", ErrGresOrderUnknown)
		}
		file, ok := l.kv["file"]
		if !ok || file == "" {
			return nil, fmt.Errorf("%w: a gpu line without File=", ErrGresOrderUnknown)
		}
		fs, err := ExpandHostlist(file)
		if err != nil {
			return nil, fmt.Errorf("%w: File=%s: %v", ErrGresOrderUnknown, file, err)
		}
		files = append(files, fs...)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no gpu line with File= for node %s", ErrGresOrderUnknown, node)
	}
	return files, nil
}

// How DeviceMinor found a file's minor number.
const (
	// MinorByStat: the device's own minor (stat's st_rdev).
	MinorByStat = "stat"
	// MinorByName: the file's trailing number (stat failed, or the file
	// is not a device).
	MinorByName = "name"
)

// DeviceMinor is the minor number of the device file path: from stat
// (st_rdev of a character or block device, by MinorByStat), else the
// trailing decimal number of its name (by MinorByName). ok is false when
// neither gives one.
func DeviceMinor(path string) (minor int, by string, ok bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err == nil {
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFCHR || t == unix.S_IFBLK {
			return int(unix.Minor(uint64(st.Rdev))), MinorByStat, true
		}
	}
	i := len(path)
	for i > 0 && path[i-1] >= '0' && path[i-1] <= '9' {
		i--
	}
	if i == len(path) || len(path)-i > 6 {
		return 0, "", false
	}
	n, err := strconv.Atoi(path[i:])
	if err != nil {
		return 0, "", false
	}
	return n, MinorByName, true
}
