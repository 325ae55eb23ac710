package config

import (
	"errors"
	"fmt"

	"github.com/gym-otel-spank/gym-otel-spank/helper/gymschema"
	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"gopkg.in/yaml.v3"
)

// GymConfig is what the plugin reads from a resolved NeMo Gym submit config
// (package gymschema) with its otel: block typed as a layer. The file must
// already be resolved: OmegaConf interpolations (${...}) mean nothing to
// YAML.
type GymConfig struct {
	// Otel is the layer from its otel: block: Gym's own keys only (see
	// gymschema.OtelKeys); other keys there are ignored with a note.
	Otel Layer
	gymschema.Config
}

// LoadGymConfig reads a resolved NeMo Gym submit config. Every problem is
// returned (joined), each naming its key path and line; what is only
// ignored is in Notes.
func LoadGymConfig(path string) (*GymConfig, error) {
	root, err := readYAML(path)
	if err != nil {
		return nil, err
	}
	g := &GymConfig{}
	c, err := gymschema.Parse(path, root, func(n *yaml.Node) ([]string, error) {
		var notes []string
		var err error
		g.Otel, notes, err = parseGymOtel(path, n)
		return notes, err
	})
	g.Config = *c
	return g, err
}

// parseGymOtel reads a Gym config's otel: block: Gym's own keys as in a site
// file; the plugin's other keys and unknown keys are ignored with a note
// that says where they belong.
func parseGymOtel(path string, n *yaml.Node) (Layer, []string, error) {
	if n == nil || n.Kind != yaml.MappingNode {
		l, err := ParseOtelNode("config "+path, n)
		return l, nil, err
	}
	var notes []string
	var errs []error
	keep := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case gymschema.IsOtelKey(k.Value) && gymschema.IsDefault(k.Value, v):
			// A model_dump of Gym's config writes every default: the value
			// says nothing the user chose, so the site's value holds.
		case gymschema.IsOtelKey(k.Value):
			keep.Content = append(keep.Content, k, v)
		case IsKey(k.Value):
			notes = append(notes, fmt.Sprintf("%s:%d: otel.%s is not a key of Gym's otel: block (gym eval submit refuses it), so it is ignored here: set it in the site file or as the --gym-otel item %s=<value>", path, k.Line, k.Value, k.Value))
		default:
			if known, ok := NearMiss(k.Value); ok {
				// One letter off a known key is a typo, not a key of a
				// later Gym: ignoring it would run the job on the
				// known key's default.
				errs = append(errs, nearMissError(path, k, v, known))
				continue
			}
			hint := ""
			if c, ok := yamlnode.Closest(k.Value, gymschema.OtelKeys); ok {
				hint = fmt.Sprintf(" (did you mean %q?)", c)
			}
			notes = append(notes, fmt.Sprintf("%s:%d: otel.%s: not a key this plugin reads, ignored%s", path, k.Line, k.Value, hint))
		}
	}
	l, err := ParseOtelNode("config "+path, keep)
	return l, notes, errors.Join(append(errs, err)...)
}

// nearMissError is the error for the key k (value v) of a Gym config's
// otel: block that is one edit from the known key known.
func nearMissError(path string, k, v *yaml.Node, known string) error {
	val := v.Value
	if v.Kind != yaml.ScalarNode {
		val = "a " + yamlnode.KindName(v)
	}
	where := ""
	if !gymschema.IsOtelKey(known) {
		where = fmt.Sprintf("; otel.%s itself is not read from a Gym config either: set it in the site file or as the --gym-otel item %s=<value>", known, known)
	}
	return fmt.Errorf("%s:%d: otel.%s: %s: unknown key, one letter from otel.%s (did you mean %q?): as it is, the value is not used%s", path, k.Line, k.Value, val, known, known, where)
}
