package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Service is one model service of a NeMo Gym submit config
// (services.<name>): scraped at localhost:<Port>/metrics on its nodes.
type Service struct {
	// Name is the key under services:.
	Name string `json:"name"`
	// Type is services.<name>.type (vllm, ...).
	Type string `json:"type"`
	// Port is services.<name>.port, default 8000.
	Port int `json:"port"`
	// Model and ServedModelName are services.<name>.model and .served_model_name.
	Model           string `json:"model,omitempty"`
	ServedModelName string `json:"served_model_name,omitempty"`
	// Nodes is services.<name>.nodes: node names, or indexes into the job's
	// node list written as integers (0 is the job's first node). Empty means
	// every node of the job.
	Nodes []string `json:"nodes,omitempty"`
}

// RunsOn reports whether the service runs on the node called name, which is
// at position index of the job's node list.
func (s Service) RunsOn(name string, index int) bool {
	if len(s.Nodes) == 0 {
		return true
	}
	for _, n := range s.Nodes {
		if n == name || n == strconv.Itoa(index) {
			return true
		}
	}
	return false
}

// GymConfig is what the plugin reads from a resolved NeMo Gym submit config.
// Other top-level keys are ignored. The file must already be resolved:
// OmegaConf interpolations (${...}) mean nothing to YAML.
type GymConfig struct {
	// Path is the file read.
	Path string
	// Otel is the layer from its otel: block.
	Otel Layer
	// Services are the services.<name> entries, sorted by name.
	Services []Service
	// GymInstall is true when driver.gym_install is set (not null).
	GymInstall bool
	// OutputPath is job.output_path ("" when absent).
	OutputPath string
	// Cluster is the single key under compute: ("" when absent).
	Cluster string
}

// LoadGymConfig reads a resolved NeMo Gym submit config. Every problem is
// returned (joined), each naming its key path and line.
func LoadGymConfig(path string) (*GymConfig, error) {
	root, err := readYAML(path)
	if err != nil {
		return nil, err
	}
	g := &GymConfig{Path: path}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := root.Content[i]
		if first, dup := seen[k.Value]; dup {
			add(fmt.Errorf("%s:%d: %s: duplicate key (first on line %d)", path, k.Line, k.Value, first))
		}
		seen[k.Value] = k.Line
	}
	if n, err := topLevel(path, root, "otel"); err != nil {
		add(err)
	} else {
		g.Otel, err = ParseOtelNode("config "+path, n)
		add(err)
	}
	if n, _ := topLevel(path, root, "services"); n != nil {
		g.Services, err = parseServices(path, n)
		add(err)
	}
	if n, _ := topLevel(path, root, "driver"); n != nil && n.Kind == yaml.MappingNode {
		if gi, _ := topLevel(path, n, "gym_install"); gi != nil && gi.Tag != "!!null" {
			g.GymInstall = !(gi.Kind == yaml.ScalarNode && (gi.Value == "" || gi.Value == "false"))
		}
	}
	if n, _ := topLevel(path, root, "job"); n != nil && n.Kind == yaml.MappingNode {
		if op, _ := topLevel(path, n, "output_path"); op != nil && op.Tag != "!!null" {
			if op.Kind != yaml.ScalarNode {
				add(fmt.Errorf("%s:%d: job.output_path: expected a path", path, op.Line))
			} else {
				g.OutputPath = op.Value
			}
		}
	}
	if n, _ := topLevel(path, root, "compute"); n != nil && n.Tag != "!!null" {
		switch {
		case n.Kind != yaml.MappingNode:
			add(fmt.Errorf("%s:%d: compute: expected a mapping with one cluster key", path, n.Line))
		case len(n.Content) == 2:
			g.Cluster = n.Content[0].Value
		case len(n.Content) > 2:
			var names []string
			for i := 0; i < len(n.Content); i += 2 {
				names = append(names, n.Content[i].Value)
			}
			add(fmt.Errorf("%s:%d: compute: expected exactly one cluster, got %s", path, n.Line, strings.Join(names, ", ")))
		}
	}
	if err := checkInterpolations(path, root); err != nil {
		add(err)
	}
	return g, errors.Join(errs...)
}

var servicePortKey = keyDef{name: "port", kind: kindPort, min: 1, max: 65535}

func parseServices(path string, n *yaml.Node) ([]Service, error) {
	if n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: services: expected a mapping of service names", path, n.Line)
	}
	var out []Service
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, body := n.Content[i].Value, n.Content[i+1]
		s := Service{Name: name, Port: 8000}
		if body.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s:%d: services.%s: expected a mapping", path, body.Line, name))
			continue
		}
		for j := 0; j+1 < len(body.Content); j += 2 {
			k, v := body.Content[j], body.Content[j+1]
			where := fmt.Sprintf("%s:%d: services.%s.%s", path, k.Line, name, k.Value)
			switch k.Value {
			case "type", "model", "served_model_name":
				if v.Tag == "!!null" {
					continue
				}
				if v.Kind != yaml.ScalarNode {
					errs = append(errs, fmt.Errorf("%s: expected a string", where))
					continue
				}
				switch k.Value {
				case "type":
					s.Type = v.Value
				case "model":
					s.Model = v.Value
				default:
					s.ServedModelName = v.Value
				}
			case "port":
				pv, err := servicePortKey.parseNode(v)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					continue
				}
				s.Port = pv.i
			case "nodes":
				nodes, err := parseNodes(v)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", where, err))
					continue
				}
				s.Nodes = nodes
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, errors.Join(errs...)
}

func parseNodes(v *yaml.Node) ([]string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return nil, nil
		}
		return []string{v.Value}, nil
	case yaml.SequenceNode:
		var out []string
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
				return nil, fmt.Errorf("expected node names or node indexes, got a %s", nodeKindName(e))
			}
			if e.Tag == "!!int" {
				if i, err := strconv.Atoi(e.Value); err != nil || i < 0 {
					return nil, fmt.Errorf("node index %s must be 0 or more", e.Value)
				}
			}
			out = append(out, e.Value)
		}
		return out, nil
	}
	return nil, fmt.Errorf("expected a list of node names or indexes")
}

// checkInterpolations reports the first OmegaConf interpolation left in the
// parts this plugin reads: the file must be resolved before staging.
func checkInterpolations(path string, root *yaml.Node) error {
	var found *yaml.Node
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if found != nil {
			return
		}
		if n.Kind == yaml.ScalarNode && n.Style != yaml.SingleQuotedStyle && strings.Contains(n.Value, "${") {
			found = n
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	for _, key := range []string{"otel", "services", "job"} {
		if n, _ := topLevel(path, root, key); n != nil {
			walk(n)
		}
	}
	if found != nil {
		return fmt.Errorf("%s:%d: %q is an unresolved interpolation: stage the resolved config (OmegaConf.to_yaml(cfg, resolve=True))", path, found.Line, found.Value)
	}
	return nil
}
