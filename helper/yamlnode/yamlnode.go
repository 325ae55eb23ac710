// Package yamlnode holds what the readers of the plugin's YAML files (the
// otel: block in package config, a Gym submit config in package gymschema)
// share to find a key and to name a value in a message: a mapping's key
// lookup, a node's kind and a scalar's description, and the nearest known
// name for a "did you mean" hint. It imports nothing of the module.
package yamlnode

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// Lookup returns the value node of key in mapping m, nil when absent, and
// an error naming file and line when the key appears twice.
func Lookup(file string, m *yaml.Node, key string) (*yaml.Node, error) {
	var found *yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != key {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%s:%d: %s: duplicate key", file, m.Content[i].Line, key)
		}
		found = m.Content[i+1]
	}
	return found, nil
}

// KindName is "list", "mapping" or "value": the kind of n for a message.
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	}
	return "value"
}

// DescribeScalar names a scalar for a message where a number was expected:
// its type (string, decimal, boolean) and text.
func DescribeScalar(n *yaml.Node) string {
	switch n.Tag {
	case "!!str":
		return fmt.Sprintf("the string %q (write the number without quotes)", n.Value)
	case "!!float":
		return fmt.Sprintf("the decimal %s", n.Value)
	case "!!bool":
		return fmt.Sprintf("the boolean %s", n.Value)
	}
	return fmt.Sprintf("%q", n.Value)
}

// Describe is DescribeScalar for a scalar, else "a list" or "a mapping".
func Describe(v *yaml.Node) string {
	if v.Kind == yaml.ScalarNode {
		return DescribeScalar(v)
	}
	return "a " + KindName(v)
}

// Closest returns the candidate nearest to name by edit distance, and
// whether it is near enough to suggest (at most 2 edits, or a third of
// name's length for long names).
func Closest(name string, candidates []string) (string, bool) {
	best, bestD := "", 1<<30
	for _, k := range candidates {
		if d := EditDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best, best != "" && bestD <= max(2, len(name)/3)
}

// EditDistance is the Levenshtein distance between a and b, in bytes.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
