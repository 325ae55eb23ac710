package config

import (
	"errors"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// Layer is one source of otel: settings. Layers apply in order over
// Defaults(); a later layer's key wins. The zero Layer sets nothing.
type Layer struct {
	// Source names the layer in messages, e.g. "site file /etc/slurm/gym-otel.yaml".
	Source   string
	settings []setting
}

type setting struct {
	def   *keyDef
	v     value
	where string // "file:line" or the inline item
}

// where is where the layer sets key ("" when it does not): "file:line" or
// the inline source.
func (l Layer) where(key string) string {
	w := ""
	for _, s := range l.settings {
		if s.def.name == key {
			w = s.where
		}
	}
	return w
}

// Apply returns base with this layer's settings applied.
func (l Layer) Apply(base Otel) Otel {
	for _, s := range l.settings {
		v := s.v
		if v.null {
			v = value{} // null on a nullable key: port 0 (skip), container "" (none)
		}
		s.def.set(&base, v)
	}
	return base
}

// ParseOtelNode builds a Layer from the YAML mapping under otel:. file names
// the source in messages. Strict: unknown and duplicate keys are errors that
// name otel.<key> and the line, with the closest known key suggested.
// An empty or null node gives an empty layer. All problems are returned,
// joined (errors.Join), one per line.
func ParseOtelNode(file string, n *yaml.Node) (Layer, error) {
	l := Layer{Source: file}
	if n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return l, nil
	}
	if n.Kind != yaml.MappingNode {
		return l, fmt.Errorf("%s:%d: otel: expected a mapping of otel keys, got a %s", file, n.Line, yamlnode.KindName(n))
	}
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		name := kn.Value
		where := fmt.Sprintf("%s:%d", file, kn.Line)
		if first, dup := seen[name]; dup {
			errs = append(errs, fmt.Errorf("%s: otel.%s: duplicate key (first set on line %d)", where, name, first))
			continue
		}
		seen[name] = kn.Line
		def, ok := lookupKey(name)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: otel.%s: unknown key%s", where, name, suggest(name)))
			continue
		}
		v, err := def.parseNode(vn)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: otel.%s: %w", where, name, err))
			continue
		}
		l.settings = append(l.settings, setting{def: def, v: v, where: where})
	}
	return l, errors.Join(errs...)
}

// ParseInline builds a Layer from key=value items (plugstack.conf arguments
// or SPEC items). source names where the items come from in messages, e.g.
// "plugstack.conf" or "--gym-otel". Unknown keys are errors naming the item.
func ParseInline(source string, items []Item) (Layer, error) {
	l := Layer{Source: source}
	var errs []error
	seen := map[string]bool{}
	for _, it := range items {
		def, ok := lookupKey(it.Key)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s: unknown otel key%s", source, it.Key, suggest(it.Key)))
			continue
		}
		if seen[it.Key] {
			errs = append(errs, fmt.Errorf("%s: %s: given twice", source, it.Key))
			continue
		}
		seen[it.Key] = true
		v, err := def.parseText(it.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: otel.%s=%s: %w", source, it.Key, it.Value, err))
			continue
		}
		l.settings = append(l.settings, setting{def: def, v: v, where: source})
	}
	return l, errors.Join(errs...)
}

// LoadSiteFile reads the site file's otel: block (see LoadSite).
func LoadSiteFile(path string) (Layer, error) {
	s, err := LoadSite(path)
	return s.Layer, err
}

// readYAML parses one YAML document; an empty file is an empty mapping.
func readYAML(path string) (*yaml.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		if line, msg, ok := yamlErrorLine(data, err); ok {
			return nil, fmt.Errorf("%s:%d: not valid YAML: %s%s", path, line, msg, blockOf(data, line))
		}
		return nil, fmt.Errorf("%s: not valid YAML: %w", path, err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: expected a mapping at the top level", path, root.Line)
	}
	return root, nil
}

// yamlLineRE splits the YAML parser's message: "yaml: line N: problem".
var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^yaml: line (\d+): (.*)$`) })

// maxYAMLRetries bounds the parses yamlErrorLine makes.
const maxYAMLRetries = 2000

// yamlErrorLine finds the file's line of a YAML syntax error. The parser
// names the line where the construct around the problem began (for a
// parser error, counted from 0: the line above it), not the problem's: in
// a Gym config that is often the otel: key above a broken value. The
// problem's line is the first line L from there such that the file's
// first L lines fail with the same problem. ok is false when err is not a
// syntax error with a line, or no such L is found (the parser's line is
// then the one to give).
func yamlErrorLine(data []byte, err error) (line int, msg string, ok bool) {
	m := yamlLineRE().FindStringSubmatch(err.Error())
	if m == nil {
		return 0, "", false
	}
	from, _ := strconv.Atoi(m[1])
	msg = m[2]
	lines := strings.SplitAfter(string(data), "\n")
	for l := max(from, 1); l <= len(lines) && l < from+maxYAMLRetries; l++ {
		var doc yaml.Node
		perr := yaml.Unmarshal([]byte(strings.Join(lines[:l], "")), &doc)
		if pm := yamlLineRE().FindStringSubmatch(fmt.Sprint(perr)); pm != nil && pm[2] == msg {
			return l, msg, true
		}
	}
	return 0, "", false
}

// blockOf is " (in the KEY: block)" for the top-level key whose block holds
// the file's line (counted from 1), or "".
func blockOf(data []byte, line int) string {
	lines := strings.Split(string(data), "\n")
	for i := min(line, len(lines)) - 1; i >= 0; i-- {
		l := lines[i]
		if l == "" || l[0] == ' ' || l[0] == '\t' || l[0] == '#' || l[0] == '-' {
			continue
		}
		if k, _, found := strings.Cut(l, ":"); found && validKey(strings.TrimSpace(k)) {
			return " (in the " + strings.TrimSpace(k) + ": block)"
		}
		return ""
	}
	return ""
}

// suggest returns ` (did you mean "x"?)` for the known key closest to name,
// or "" when none is close.
func suggest(name string) string {
	best, bestD := "", 1<<30
	for _, k := range keyDefs {
		if d := yamlnode.EditDistance(name, k.name); d < bestD {
			best, bestD = k.name, d
		}
	}
	if bestD <= max(2, len(name)/3) {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Sprintf(" (known keys: %s)", strings.Join(Keys(), ", "))
}

// NearMiss returns the otel key that name is one edit from (one letter
// added, dropped or changed, or two neighbours swapped), and whether there
// is one. A name that is a key is no near miss.
func NearMiss(name string) (string, bool) {
	if IsKey(name) {
		return "", false
	}
	for _, k := range keyDefs {
		if yamlnode.EditDistance(name, k.name) == 1 || swapped(name, k.name) {
			return k.name, true
		}
	}
	return "", false
}

// swapped reports whether a is b with two neighbouring characters swapped.
func swapped(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	i := 0
	for i < len(a) && a[i] == b[i] {
		i++
	}
	return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:]
}

// IsKey reports whether name is a key of the otel: block.
func IsKey(name string) bool {
	_, ok := lookupKey(name)
	return ok
}
