package render

import (
	"bytes"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestScalarNodeAsEncode: every value scalarNode builds directly encodes
// byte for byte as yaml.v3's Node.Encode of it would, among them the
// strings YAML reads as another type (numbers, booleans, null, the
// indicators), which must come out quoted.
func TestScalarNodeAsEncode(t *testing.T) {
	values := []any{true, false, 0, -7, 41001, int64(1) << 40, []string{}, []string{"a", "b c"}, []string{"1", "true"}}
	for _, s := range []string{"", "a", "abc_def", "A-b.c/d", "123", "-1", "+1", "1.5", "1e3", "0x1F", "0o17", "0b1", ".inf", "-.Inf", ".nan",
		"true", "False", "TRUE", "null", "Null", "~", "-", "--", "---", "...", "a b", " a", "a ", "#x", "x #y", "x# y", "@x", "`x", "'x", "\"x", "!x", "&x", "*x",
		"- x", "? x", "?x", "|", ">", "%x", "{x", "}", "[x", "]", "x,y", "x, y", "é", "日本", "a\tb", "=", "<<", "2006-01-02", "2006-01-02T15:04:05Z",
		"${env:X}", "$$", "Bearer ${env:T}", "^(?:up|scrape_.*)$$", "resource.attributes[\"x\"] == \"y\"", "1_000", "0755", "+.5", "._x"} {
		values = append(values, s, []string{s})
	}
	for _, v := range values {
		direct := scalarNode(v)
		if direct == nil {
			if s, ok := v.(string); ok && plainString(s) {
				t.Errorf("%q: no direct node for a string plainString takes", s)
			}
			continue
		}
		var viaEncode yaml.Node
		if err := viaEncode.Encode(v); err != nil {
			t.Fatal(err)
		}
		got, want := encodeDoc(t, direct), encodeDoc(t, &viaEncode)
		if !bytes.Equal(got, want) {
			t.Errorf("%#v: direct node encodes as %q, Node.Encode's as %q", v, got, want)
		}
	}
}

// encodeDoc is the YAML of {k: n}, as Render encodes its documents.
func encodeDoc(t *testing.T, n *yaml.Node) []byte {
	t.Helper()
	doc := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{{Kind: yaml.ScalarNode, Tag: "!!str", Value: "k"}, n}}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	enc.Close()
	return b.Bytes()
}
