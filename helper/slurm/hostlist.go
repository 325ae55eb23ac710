package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// ExpandHostlist expands a Slurm hostlist such as "gn[1-3,7],login01" or
// "rack[1-2]-n[01-02]" into host names, in order. Zero padding of a range's
// lower bound is kept ("n[08-10]" gives n08 n09 n10).
func ExpandHostlist(s string) ([]string, error) {
	var out []string
	for _, item := range splitTop(s) {
		if item == "" {
			continue
		}
		hosts, err := expandOne(item)
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", s, err)
		}
		out = append(out, hosts...)
	}
	return out, nil
}

// splitTop splits on commas outside brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

func expandOne(item string) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.ContainsRune(item, ']') {
			return nil, fmt.Errorf("unbalanced ] in %q", item)
		}
		return []string{item}, nil
	}
	closeAt := strings.IndexByte(item[open:], ']')
	if closeAt < 0 {
		return nil, fmt.Errorf("unbalanced [ in %q", item)
	}
	closeAt += open
	prefix, body, rest := item[:open], item[open+1:closeAt], item[closeAt+1:]
	tails, err := expandOne(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if lo == "" || err1 != nil || err2 != nil || b < a || b-a > 100000 {
			return nil, fmt.Errorf("bad range %q in %q", r, item)
		}
		width := len(lo)
		for n := a; n <= b; n++ {
			num := fmt.Sprintf("%0*d", width, n)
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}

// NodeIndex returns the position of node in the expanded hostlist, or -1.
func NodeIndex(hostlist, node string) (int, error) {
	hosts, err := ExpandHostlist(hostlist)
	if err != nil {
		return -1, err
	}
	for i, h := range hosts {
		if h == node {
			return i, nil
		}
	}
	return -1, nil
}
