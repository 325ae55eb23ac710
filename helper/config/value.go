package config

import (
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// parseNode types one YAML value of key k. Booleans must be the YAML booleans
// true or false: yes, on and "true" are errors ("expected true or false").
// Ports and integers must be plain YAML integers: quoted numbers, floats and
// lists are errors. Strings keep no/on/off/y as strings.
func (k *keyDef) parseNode(n *yaml.Node) (value, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if k.kind == kindPatterns && n.Kind == yaml.SequenceNode {
		var ps []string
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode || c.Tag == "!!null" {
				return value{}, fmt.Errorf("expected a %s, got a %s in the list", k.kindName(), yamlnode.KindName(c))
			}
			ps = append(ps, c.Value)
		}
		return checkPatterns(ps)
	}
	if n.Kind != yaml.ScalarNode {
		return value{}, fmt.Errorf("expected a %s, got a %s", k.kindName(), yamlnode.KindName(n))
	}
	if n.Tag == "!!null" {
		if k.nullable {
			return value{null: true}, nil
		}
		return value{}, fmt.Errorf("null is not allowed here; remove the key to get the default, or set a %s", k.kindName())
	}
	switch k.kind {
	case kindBool:
		if n.Tag != "!!bool" {
			return value{}, fmt.Errorf("expected true or false, got %q", n.Value)
		}
		b, err := strconv.ParseBool(strings.ToLower(n.Value))
		if err != nil {
			return value{}, fmt.Errorf("expected true or false, got %q", n.Value)
		}
		return value{b: b}, nil
	case kindPort, kindInt:
		if n.Tag != "!!int" {
			return value{}, fmt.Errorf("expected %s, got %s", k.kindName(), yamlnode.DescribeScalar(n))
		}
		return k.checkInt(n.Value)
	default:
		// String kinds accept any scalar's text (a model called 2024 is a
		// name), but a quoted or plain string is what users write.
		return k.checkString(n.Value)
	}
}

// parseText types one value written as text: an inline SPEC item or a
// plugstack.conf argument. "null" (or "none") on a nullable key means skip.
func (k *keyDef) parseText(s string) (value, error) {
	if k.nullable && (s == "null" || s == "none" || s == "~") {
		return value{null: true}, nil
	}
	switch k.kind {
	case kindBool:
		switch s {
		case "true":
			return value{b: true}, nil
		case "false":
			return value{b: false}, nil
		}
		return value{}, fmt.Errorf("expected true or false, got %q", s)
	case kindPort, kindInt:
		return k.checkInt(s)
	case kindPatterns:
		return checkPatterns(strings.Fields(s))
	default:
		return k.checkString(s)
	}
}

// checkPatterns types a kindPatterns value: at least one pattern, each a
// valid RE2 regular expression on one line.
func checkPatterns(ps []string) (value, error) {
	if len(ps) == 0 {
		return value{}, fmt.Errorf("expected at least one regular expression (null keeps every series)")
	}
	for _, p := range ps {
		if p == "" || strings.ContainsAny(p, "\n\r") {
			return value{}, fmt.Errorf("%q: a pattern is one non-empty line", p)
		}
		if _, err := regexp.Compile("^(?:" + p + ")$"); err != nil {
			return value{}, fmt.Errorf("%q is not a regular expression: %v", p, err)
		}
	}
	return value{s: strings.Join(ps, "\n")}, nil
}

func (k *keyDef) checkInt(s string) (value, error) {
	i, err := strconv.Atoi(s)
	if err != nil {
		return value{}, fmt.Errorf("expected %s, got %q", k.kindName(), s)
	}
	if i < k.min || i > k.max {
		return value{}, fmt.Errorf("%d is out of range %d..%d", i, k.min, k.max)
	}
	return value{i: i}, nil
}

func (k *keyDef) checkString(s string) (value, error) {
	switch k.kind {
	case kindEnum:
		for _, e := range k.enum {
			if s == e {
				return value{s: s}, nil
			}
		}
		return value{}, fmt.Errorf("expected one of %s, got %q", strings.Join(k.enum, ", "), s)
	case kindMode:
		m, err := strconv.ParseUint(s, 8, 32)
		if err != nil || len(s) < 3 || m > 0o777 {
			return value{}, fmt.Errorf("expected an octal mode such as \"0700\", got %q", s)
		}
		if m&0o700 != 0o700 {
			return value{}, fmt.Errorf("mode %q must give the owner rwx (0700)", s)
		}
		if m&0o022 != 0 {
			// Another user who can write the output dir can plant links
			// the collector's files would follow.
			return value{}, fmt.Errorf("mode %q lets group or others write the output dir (traces and logs hold prompts, and a planted link would be followed): use 0700, 0750 or 0755", s)
		}
		return value{s: fmt.Sprintf("%04o", m)}, nil
	}
	if strings.ContainsRune(s, 0) {
		return value{}, fmt.Errorf("contains a NUL byte")
	}
	return value{s: s}, nil
}

func (k *keyDef) kindName() string {
	switch k.kind {
	case kindBool:
		return "boolean (true or false)"
	case kindPort:
		return "port number (an integer 1..65535, or null to skip)"
	case kindInt:
		return fmt.Sprintf("whole number %d..%d", k.min, k.max)
	case kindEnum:
		return "one of " + strings.Join(k.enum, ", ")
	case kindMode:
		return "quoted octal mode such as \"0700\""
	case kindPatterns:
		return "list of regular expressions (each matched against the whole metric name)"
	}
	return "string"
}
