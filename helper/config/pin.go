package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"
)

// Site is the site file: its otel: block and the keys it pins.
type Site struct {
	// Layer is the otel: block.
	Layer Layer
	// Pinned are the otel keys the site pins (the top-level pinned: list):
	// for these the site's value (built-in default, site file, plugstack
	// items) is used whatever a job's Gym config or --gym-otel says, at
	// submit and again on every node, so a user value, or a forged
	// GYM_OTEL_SPEC, never chooses it.
	Pinned []string
}

// LoadSite reads the site file: the otel: block (other top-level keys are
// ignored, so a NeMo Gym cluster fragment serves as one) and the top-level
// pinned: list of otel keys.
func LoadSite(path string) (Site, error) {
	root, err := readYAML(path)
	if err != nil {
		return Site{}, err
	}
	otel, err := yamlnode.Lookup(path, root, "otel")
	if err != nil {
		return Site{}, err
	}
	l, lerr := ParseOtelNode("site file "+path, otel)
	pn, err := yamlnode.Lookup(path, root, "pinned")
	if err != nil {
		return Site{Layer: l}, errors.Join(lerr, err)
	}
	pinned, perr := parsePinned(path, pn)
	return Site{Layer: l, Pinned: pinned}, errors.Join(lerr, perr)
}

// parsePinned reads the pinned: list: otel key names, each known.
func parsePinned(file string, n *yaml.Node) ([]string, error) {
	if n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: pinned: expected a list of otel keys, got a %s", file, n.Line, yamlnode.KindName(n))
	}
	var out []string
	var errs []error
	for i, it := range n.Content {
		if it.Kind != yaml.ScalarNode || !IsKey(it.Value) {
			errs = append(errs, fmt.Errorf("%s:%d: pinned[%d]: %q is not an otel key%s", file, it.Line, i, it.Value, suggest(it.Value)))
			continue
		}
		if !slices.Contains(out, it.Value) {
			out = append(out, it.Value)
		}
	}
	return out, errors.Join(errs...)
}

// SiteOtel is the site's own settings: Defaults() with the site file and
// the plugstack items applied, and the keys the site pins.
func SiteOtel(siteFile string, items []Item) (Otel, []string, error) {
	o := Defaults()
	var pinned []string
	var errs []error
	if siteFile != "" {
		s, err := LoadSite(siteFile)
		errs = append(errs, err)
		o, pinned = s.Layer.Apply(o), s.Pinned
	}
	if len(items) > 0 {
		l, err := ParseInline("plugstack.conf", items)
		errs = append(errs, err)
		o = l.Apply(o)
	}
	return o, pinned, errors.Join(errs...)
}

// pin returns o with every key of keys set to its value in site, and the
// keys whose value that changed.
func pin(o, site Otel, keys []string) (Otel, []string) {
	if len(keys) == 0 {
		return o, nil
	}
	have, want := otelFields(o), otelFields(site)
	var changed []string
	for _, k := range keys {
		if string(have[k]) != string(want[k]) {
			changed = append(changed, k)
			if want[k] == nil {
				delete(have, k)
			} else {
				have[k] = want[k]
			}
		}
	}
	if len(changed) == 0 {
		return o, nil
	}
	b, _ := json.Marshal(have)
	var out Otel
	if err := json.Unmarshal(b, &out); err != nil {
		panic("config: pin: " + err.Error()) // the fields of one struct
	}
	return out, changed
}

// otelFields is o's JSON fields by key (the JSON names are the otel keys).
func otelFields(o Otel) map[string]json.RawMessage {
	b, _ := json.Marshal(o)
	m := map[string]json.RawMessage{}
	_ = json.Unmarshal(b, &m)
	return m
}

// fieldText is key's value in o as a user would write it.
func fieldText(o Otel, key string) string {
	raw := otelFields(o)[key]
	if raw == nil {
		return "null"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strconv.Quote(s)
	}
	return string(raw)
}

// EnforcePins re-applies the pins of this node's site (siteFile and the
// plugstack items) to forwarded settings, so a user's value or forged
// settings never choose a pinned key on the node. It returns one line per
// key it changed, for the node's log.
func EnforcePins(r *Resolved, siteFile string, items []Item) ([]string, error) {
	site, keys, err := SiteOtel(siteFile, items)
	if err != nil {
		return nil, fmt.Errorf("this node's site settings: %w", err)
	}
	before := r.Otel
	var changed []string
	r.Otel, changed = pin(r.Otel, site, keys)
	lines := make([]string, 0, len(changed))
	for _, k := range changed {
		lines = append(lines, fmt.Sprintf("otel.%s: the job's value %s is not this node's pinned %s: using the pinned value", k, fieldText(before, k), fieldText(r.Otel, k)))
	}
	return lines, nil
}
