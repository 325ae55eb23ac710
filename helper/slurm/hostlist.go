package slurm

import (
	"fmt"
	"sort"
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

// CompressHostlist writes host names as one Slurm hostlist, the inverse
// of ExpandHostlist: names that differ only in their trailing number share
// a bracket of ranges ("gn1".."gn16", "gn20" give "gn[1-16,20]"). Names are
// deduplicated and ordered naturally (NaturalLess: gn2 before gn10);
// zero-padded numbers join a range only with numbers of their width
// ("n08", "n09", "n10" give "n[08-10]"). A name holding '[', ']' or ','
// is kept as it is. Empty input gives "".
func CompressHostlist(names []string) string {
	sorted := append([]string(nil), names...)
	sort.SliceStable(sorted, func(i, j int) bool { return NaturalLess(sorted[i], sorted[j]) })
	type host struct {
		prefix, digits string
		n              int
	}
	var groups [][]host
	var last string
	for i, name := range sorted {
		if i > 0 && name == last {
			continue
		}
		last = name
		h := host{prefix: name}
		if !strings.ContainsAny(name, "[],") {
			k := len(name)
			for k > 0 && name[k-1] >= '0' && name[k-1] <= '9' {
				k--
			}
			if k < len(name) && len(name)-k <= 9 {
				h.prefix, h.digits = name[:k], name[k:]
				h.n, _ = strconv.Atoi(h.digits)
			}
		}
		if g := len(groups); g > 0 && h.digits != "" && groups[g-1][0].digits != "" && groups[g-1][0].prefix == h.prefix {
			groups[g-1] = append(groups[g-1], h)
		} else {
			groups = append(groups, []host{h})
		}
	}
	padded := func(d string) bool { return len(d) > 1 && d[0] == '0' }
	var out []string
	for _, g := range groups {
		if len(g) == 1 {
			out = append(out, g[0].prefix+g[0].digits)
			continue
		}
		var ranges []string
		for i := 0; i < len(g); {
			j := i
			for j+1 < len(g) && g[j+1].n == g[j].n+1 &&
				(len(g[j+1].digits) == len(g[i].digits) || !padded(g[i].digits) && !padded(g[j+1].digits)) {
				j++
			}
			if j == i {
				ranges = append(ranges, g[i].digits)
			} else {
				ranges = append(ranges, g[i].digits+"-"+g[j].digits)
			}
			i = j + 1
		}
		out = append(out, g[0].prefix+"["+strings.Join(ranges, ",")+"]")
	}
	return strings.Join(out, ",")
}

// NaturalLess orders strings with their runs of digits compared as
// numbers: gn2 before gn10, rack1-n9 before rack1-n10. Equal numbers with
// more leading zeros come after; otherwise bytes compare as usual.
func NaturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			if da != db {
				return da < db
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

// digitRun is the length of the run of ASCII digits s starts with.
func digitRun(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
