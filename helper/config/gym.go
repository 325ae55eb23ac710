package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Service is one scrape endpoint of a NeMo Gym submit config: an HTTP
// server that Gym's Slurm executor starts for a model service and that
// serves Prometheus text at localhost:<Port>/metrics on the nodes in Nodes.
// A vllm service gives one; a vllm_pd service gives its two tiers
// (<name>-prefill, <name>-decode). See docs/gym-contract.md for where Gym
// runs what.
type Service struct {
	// Name is the deployed service name: the key under services:, or
	// <name>-prefill and <name>-decode for the tiers of a vllm_pd service.
	// The scrape job is <component>/<Name>.
	Name string `json:"name"`
	// Type is the Gym service type the endpoint comes from (vllm, vllm_pd).
	Type string `json:"type"`
	// Port is the serving port (services.<name>.port, default 8000; a
	// vllm_pd tier defaults to the service's port + 1 and + 2).
	Port int `json:"port"`
	// Model and ServedModelName are services.<name>.model and .served_model_name.
	Model           string `json:"model,omitempty"`
	ServedModelName string `json:"served_model_name,omitempty"`
	// Nodes are the indexes, in the job's node list (0 is the first node),
	// of the nodes where the endpoint serves /metrics. Empty means every
	// node of the job: a config without compute node_pools, where Gym's
	// srun of the service is not sized and runs on every node.
	Nodes []int `json:"nodes,omitempty"`
}

// RunsOn reports whether the endpoint serves /metrics on the node at
// position index (0 first) of the job's node list.
func (s Service) RunsOn(index int) bool {
	if len(s.Nodes) == 0 {
		return true
	}
	for _, n := range s.Nodes {
		if n == index {
			return true
		}
	}
	return false
}

// portKey is the config path of the endpoint's port, for messages:
// services.<name>.port, or services.<name>.prefill.port (.decode.port) for
// a tier of a vllm_pd service.
func (s Service) portKey() string {
	if s.Type == typeVLLMPD {
		for _, t := range []string{"prefill", "decode"} {
			if base, ok := strings.CutSuffix(s.Name, "-"+t); ok {
				return "services." + base + "." + t + ".port"
			}
		}
	}
	return "services." + s.Name + ".port"
}

// GymConfig is what the plugin reads from a resolved NeMo Gym submit config.
// Other keys are ignored, whatever Gym adds. The file must already be
// resolved: OmegaConf interpolations (${...}) mean nothing to YAML.
type GymConfig struct {
	// Otel is the layer from its otel: block: Gym's own keys only (see
	// GymOtelKeys); other keys there are ignored with a note.
	Otel Layer
	// Services are the scrape endpoints of its services, sorted by name.
	Services []Service
	// PolicyModel is the model name of the service driver.policy_model
	// names (served_model_name, else model); "" when unset.
	PolicyModel string
	// GymInstall is true when driver.gym_install is set (not null).
	GymInstall bool
	// OutputPath is job.output_path ("" when absent).
	OutputPath string
	// Cluster is the single key under compute: ("" when absent).
	Cluster string
	// Notes are one-line warnings: keys ignored, services not scraped.
	Notes []string
}

// GymOtelKeys are the keys of the otel: block in NeMo Gym's own submit
// schema (the 14 keys of the seed). Gym's config models forbid every other
// key, so the plugin's own keys (on_failure, memory_limit_mib, ...) come
// from the site file, plugstack.conf or the --gym-otel SPEC, never from a
// Gym config.
var GymOtelKeys = []string{
	"enabled", "endpoint", "service_name", "token_env", "binary", "container",
	"component", "gym_telemetry", "gym_span_groups", "gym_logs",
	"gpu_metrics_port", "node_metrics_port", "scrape_interval_seconds",
	"health_check_timeout_seconds",
}

// gymOtelDefaults are the defaults of Gym's OtelConfig (NVIDIA-NeMo/Gym
// nemo_gym/orchestration/api.py at 8252f8e85280e668a52c3af68167b838e8d03e5f)
// as YAML scalars ("null" for None), for the keys a deployment sets in its
// shared cluster fragment (the seed: endpoint, service_name, token_env,
// binary; and container). A model_dump of Gym's config writes every
// default, so such a value says nothing the user chose and the site's value
// holds. The job's own tuning keys (scrape interval, ports, span groups,
// ...) are not here: Gym's executor uses whatever its config says, default
// or not, and so does the plugin. enabled is never here.
var gymOtelDefaults = map[string]string{
	"binary": "otelcol-contrib", "container": "null", "endpoint": "null",
	"token_env": "OTEL_TOKEN", "service_name": "null",
}

// isGymDefault reports whether v, the value of Gym otel key k in a Gym
// config, is Gym's own default for k.
func isGymDefault(k string, v *yaml.Node) bool {
	d, ok := gymOtelDefaults[k]
	if !ok || v.Kind != yaml.ScalarNode {
		return false
	}
	if v.Tag == "!!null" {
		return d == "null"
	}
	if d == "null" || v.Value != d {
		return false
	}
	// A quoted "true" or "15" is not Gym's bool or int default.
	_, numeric := strconv.Atoi(d)
	typed := numeric == nil || d == "true"
	return !typed || v.Tag != "!!str"
}

func isGymOtelKey(k string) bool {
	for _, g := range GymOtelKeys {
		if g == k {
			return true
		}
	}
	return false
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
		var notes []string
		g.Otel, notes, err = parseGymOtel(path, n)
		g.Notes = append(g.Notes, notes...)
		add(err)
	}
	var pools []nodePool
	if n, _ := topLevel(path, root, "compute"); n != nil && n.Tag != "!!null" {
		if n.Kind != yaml.MappingNode {
			add(fmt.Errorf("%s:%d: compute: expected a mapping with one cluster key", path, n.Line))
		} else {
			// A compute entry of type kubernetes is Gym's Kubernetes
			// executor's: it never runs under Slurm, so it is ignored.
			var names []string
			var body *yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if computeType(path, n.Content[i+1]) == "kubernetes" {
					g.Notes = append(g.Notes, fmt.Sprintf("%s:%d: compute.%s is of type kubernetes, not a Slurm cluster, so it is ignored", path, n.Content[i].Line, n.Content[i].Value))
					continue
				}
				names = append(names, n.Content[i].Value)
				body = n.Content[i+1]
			}
			switch {
			case len(names) == 1:
				g.Cluster = names[0]
				pools, err = parseNodePools(path, g.Cluster, body)
				add(err)
			case len(names) > 1:
				add(fmt.Errorf("%s:%d: compute: expected exactly one cluster, got %s", path, n.Line, strings.Join(names, ", ")))
			}
		}
	}
	policy := ""
	if n, _ := topLevel(path, root, "driver"); n != nil && n.Kind == yaml.MappingNode {
		if gi, _ := topLevel(path, n, "gym_install"); gi != nil && gi.Tag != "!!null" {
			g.GymInstall = !(gi.Kind == yaml.ScalarNode && (gi.Value == "" || gi.Value == "false"))
		}
		if pm, _ := topLevel(path, n, "policy_model"); pm != nil && pm.Kind == yaml.ScalarNode && pm.Tag != "!!null" {
			policy = pm.Value
		}
	}
	if n, _ := topLevel(path, root, "services"); n != nil {
		var notes []string
		var models map[string]string
		g.Services, models, notes, err = parseServices(path, n, pools)
		g.Notes = append(g.Notes, notes...)
		g.PolicyModel = models[policy]
		add(err)
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
	if err := checkInterpolations(path, root); err != nil {
		add(err)
	}
	return g, errors.Join(errs...)
}

// computeType is compute.<cluster>.type ("" when absent or not a string).
func computeType(path string, c *yaml.Node) string {
	if c == nil || c.Kind != yaml.MappingNode {
		return ""
	}
	t, _ := topLevel(path, c, "type")
	if t == nil || t.Kind != yaml.ScalarNode || t.Tag == "!!null" {
		return ""
	}
	return t.Value
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
	keep := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case isGymOtelKey(k.Value) && isGymDefault(k.Value, v):
			// A model_dump of Gym's config writes every default: the value
			// says nothing the user chose, so the site's value holds.
		case isGymOtelKey(k.Value):
			keep.Content = append(keep.Content, k, v)
		case IsKey(k.Value):
			notes = append(notes, fmt.Sprintf("%s:%d: otel.%s is not a key of Gym's otel: block (gym eval submit refuses it), so it is ignored here: set it in the site file or as the --gym-otel item %s=<value>", path, k.Line, k.Value, k.Value))
		default:
			hint := ""
			if c, ok := Closest(k.Value, GymOtelKeys); ok {
				hint = fmt.Sprintf(" (did you mean %q?)", c)
			}
			notes = append(notes, fmt.Sprintf("%s:%d: otel.%s: not a key this plugin reads, ignored%s", path, k.Line, k.Value, hint))
		}
	}
	l, err := ParseOtelNode("config "+path, keep)
	return l, notes, err
}

// nodePool is one entry of compute.<cluster>.node_pools: a contiguous range
// of the job's nodes, in declaration order.
type nodePool struct {
	name         string
	start, count int
}

// parseNodePools reads compute.<cluster>.node_pools (nodes defaults to 1).
func parseNodePools(path, cluster string, c *yaml.Node) ([]nodePool, error) {
	if c.Kind != yaml.MappingNode {
		return nil, nil
	}
	np, _ := topLevel(path, c, "node_pools")
	if np == nil || np.Tag == "!!null" {
		return nil, nil
	}
	if np.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: compute.%s.node_pools: expected a mapping of pool names", path, np.Line, cluster)
	}
	var out []nodePool
	var errs []error
	start := 0
	for i := 0; i+1 < len(np.Content); i += 2 {
		name, body := np.Content[i].Value, np.Content[i+1]
		count := 1
		if body.Kind == yaml.MappingNode {
			if nv, _ := topLevel(path, body, "nodes"); nv != nil {
				n, err := intNode(nv, 1, 100000)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s:%d: compute.%s.node_pools.%s.nodes: %w", path, nv.Line, cluster, name, err))
				} else {
					count = n
				}
			}
		}
		out = append(out, nodePool{name: name, start: start, count: count})
		start += count
	}
	return out, errors.Join(errs...)
}

// intNode reads a plain YAML integer in min..max.
func intNode(v *yaml.Node, min, max int) (int, error) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
		return 0, fmt.Errorf("expected an integer, got %s", describeNode(v))
	}
	i, err := strconv.Atoi(v.Value)
	if err != nil || i < min || i > max {
		return 0, fmt.Errorf("%s is out of range %d..%d", v.Value, min, max)
	}
	return i, nil
}

func describeNode(v *yaml.Node) string {
	if v.Kind == yaml.ScalarNode {
		return describeScalar(v)
	}
	return "a " + nodeKindName(v)
}

// Known service types of Gym's submit schema.
const (
	typeVLLM   = "vllm"
	typeVLLMPD = "vllm_pd"
	typeRay    = "ray"
)

var servicePortKey = keyDef{name: "port", kind: kindPort, min: 1, max: 65535}

// gymService is what the plugin reads of one Gym service (or vllm_pd tier).
type gymService struct {
	name, key       string // deployed name; config path prefix (services.<name>)
	typ             string
	port            int
	model, served   string
	nodePool        string
	hasPool         bool
	serverPerNode   bool // a vllm_pd tier with server_per_node
	prefill, decode *yaml.Node
}

// parseServices reads services: and places each endpoint on the job's
// nodes as Gym's Slurm executor does (docs/gym-contract.md, "Where Gym
// runs what"). It returns the endpoints sorted by name, each service's
// model name (for driver.policy_model), and notes for services not scraped.
func parseServices(path string, n *yaml.Node, pools []nodePool) ([]Service, map[string]string, []string, error) {
	models := map[string]string{}
	if n.Tag == "!!null" {
		return nil, models, nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, models, nil, fmt.Errorf("%s:%d: services: expected a mapping of service names", path, n.Line)
	}
	var out []Service
	var notes []string
	var errs []error
	total := 0
	for _, p := range pools {
		total += p.count
	}
	place := func(s *gymService, line int) []int {
		first, count := 0, total
		if s.hasPool {
			found := false
			var names []string
			for _, p := range pools {
				names = append(names, p.name)
				if p.name == s.nodePool {
					first, count, found = p.start, p.count, true
				}
			}
			if !found {
				known := strings.Join(names, ", ")
				if known == "" {
					known = "none declared"
				}
				errs = append(errs, fmt.Errorf("%s:%d: %s.node_pool: %q is not a pool of compute.<cluster>.node_pools (%s)", path, line, s.key, s.nodePool, known))
				return nil
			}
		} else if total == 0 {
			return nil // no pools: Gym's srun is not sized, every node
		}
		if count <= 1 {
			return []int{first}
		}
		if s.serverPerNode {
			idx := make([]int, count)
			for i := range idx {
				idx[i] = first + i
			}
			return idx
		}
		// A service across nodes (data parallel, Ray, Ray Serve) serves its
		// API and /metrics on its first node; the others run headless.
		return []int{first}
	}
	emit := func(s *gymService, line int) {
		nodes := place(s, line)
		if s.hasPool && nodes == nil {
			return
		}
		out = append(out, Service{Name: s.name, Type: s.typ, Port: s.port, Model: s.model,
			ServedModelName: s.served, Nodes: nodes})
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, body := n.Content[i].Value, n.Content[i+1]
		if body.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s:%d: services.%s: expected a mapping", path, body.Line, name))
			continue
		}
		s := &gymService{name: name, key: "services." + name, port: 8000}
		if err := readService(path, body, s, nil); err != nil && (s.typ == typeVLLM || s.typ == typeVLLMPD) {
			// Only what is scraped must be well formed; a ray or unknown
			// service's keys are Gym's business.
			errs = append(errs, err)
			continue
		}
		models[name] = s.served
		if models[name] == "" {
			models[name] = s.model
		}
		switch s.typ {
		case typeVLLM:
			emit(s, body.Line)
		case typeVLLMPD:
			// The router <name> fronts the tiers and serves the OpenAI API
			// only; each tier is a vllm serve on its own pool.
			for _, t := range []struct {
				suffix string
				node   *yaml.Node
				off    int
			}{{"prefill", s.prefill, 1}, {"decode", s.decode, 2}} {
				tier := &gymService{name: name + "-" + t.suffix, key: s.key + "." + t.suffix, typ: typeVLLMPD,
					port: s.port + t.off, model: s.model, served: s.served, serverPerNode: s.serverPerNode}
				if t.node == nil || t.node.Kind != yaml.MappingNode {
					notes = append(notes, fmt.Sprintf("%s:%d: %s.%s: missing, so %s is not scraped", path, body.Line, s.key, t.suffix, tier.name))
					continue
				}
				if err := readService(path, t.node, tier, s); err != nil {
					errs = append(errs, err)
					continue
				}
				if !tier.hasPool {
					// Gym refuses this config (api.py, SubmitConfig: "a
					// prefill/decode tier without a node_pool"): each tier
					// needs nodes of its own.
					errs = append(errs, fmt.Errorf("%s:%d: %s.node_pool: not set: each tier of a vllm_pd service needs a pool of its own in compute.<cluster>.node_pools (gym eval submit refuses a tier without one)", path, t.node.Line, tier.key))
					continue
				}
				emit(tier, t.node.Line)
			}
		case typeRay:
			// A Ray cluster: its port is Ray's GCS, not Prometheus text.
		case "":
			notes = append(notes, fmt.Sprintf("%s:%d: services.%s has no type, so it is not scraped", path, body.Line, name))
		default:
			notes = append(notes, fmt.Sprintf("%s:%d: services.%s: type %q is not one this plugin knows (vllm, vllm_pd, ray), so it is not scraped%s", path, body.Line, name, s.typ, suggestType(s.typ)))
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, models, notes, errors.Join(errs...)
}

// readService reads the keys the plugin needs from one service mapping
// (or, with parent set, one vllm_pd tier, which inherits model and
// served_model_name). Other keys are ignored.
func readService(path string, body *yaml.Node, s *gymService, parent *gymService) error {
	var errs []error
	for j := 0; j+1 < len(body.Content); j += 2 {
		k, v := body.Content[j], body.Content[j+1]
		where := fmt.Sprintf("%s:%d: %s.%s", path, k.Line, s.key, k.Value)
		switch k.Value {
		case "type", "model", "served_model_name", "node_pool":
			if v.Tag == "!!null" {
				continue
			}
			if v.Kind != yaml.ScalarNode {
				errs = append(errs, fmt.Errorf("%s: expected a string", where))
				continue
			}
			switch k.Value {
			case "type":
				if parent == nil {
					s.typ = v.Value
				}
			case "model":
				s.model = v.Value
			case "served_model_name":
				s.served = v.Value
			default:
				s.nodePool, s.hasPool = v.Value, true
			}
		case "port":
			pv, err := servicePortKey.parseNode(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			s.port = pv.i
		case "server_per_node":
			if parent == nil && v.Kind == yaml.ScalarNode && v.Tag == "!!bool" {
				s.serverPerNode = v.Value == "true" || v.Value == "True"
			}
		case "prefill":
			if parent == nil {
				s.prefill = v
			}
		case "decode":
			if parent == nil {
				s.decode = v
			}
		}
	}
	return errors.Join(errs...)
}

// gymReadServiceKeys are the keys of a service (or vllm_pd tier) whose
// values the plugin reads; an interpolation elsewhere is Gym's business.
var gymReadServiceKeys = []string{"type", "port", "model", "served_model_name", "node_pool", "server_per_node"}

// checkInterpolations reports the first OmegaConf interpolation left in a
// value this plugin reads: the 14 Gym keys of otel:, the keys of
// gymReadServiceKeys of every service and vllm_pd tier, the compute
// cluster's type and node_pools (names and nodes), driver.policy_model and
// job.output_path. Text elsewhere (pre_command, env, extra_args, benchmark
// arguments, scratch keys) is left alone: a resolved Gym config keeps shell
// text such as ${VAR:-default} there on purpose. A single-quoted scalar is
// taken as literal text.
func checkInterpolations(path string, root *yaml.Node) error {
	var found *yaml.Node
	check := func(n *yaml.Node) {
		if found == nil && n != nil && n.Kind == yaml.ScalarNode && n.Style != yaml.SingleQuotedStyle && strings.Contains(n.Value, "${") {
			found = n
		}
	}
	mapping := func(n *yaml.Node) bool { return n != nil && n.Kind == yaml.MappingNode }
	pairs := func(n *yaml.Node, f func(k, v *yaml.Node)) {
		if mapping(n) {
			for i := 0; i+1 < len(n.Content); i += 2 {
				f(n.Content[i], n.Content[i+1])
			}
		}
	}
	readKeys := func(n *yaml.Node, keys []string) {
		pairs(n, func(k, v *yaml.Node) {
			for _, want := range keys {
				if k.Value == want {
					check(v)
				}
			}
		})
	}
	if n, _ := topLevel(path, root, "otel"); n != nil {
		check(n)
		readKeys(n, GymOtelKeys)
	}
	if n, _ := topLevel(path, root, "services"); n != nil {
		pairs(n, func(_, svc *yaml.Node) {
			readKeys(svc, gymReadServiceKeys)
			pairs(svc, func(k, v *yaml.Node) {
				if k.Value == "prefill" || k.Value == "decode" {
					readKeys(v, gymReadServiceKeys)
				}
			})
		})
	}
	if n, _ := topLevel(path, root, "compute"); n != nil {
		pairs(n, func(k, c *yaml.Node) {
			check(k)
			readKeys(c, []string{"type"})
			if np, _ := topLevel(path, c, "node_pools"); np != nil && mapping(c) {
				pairs(np, func(name, pool *yaml.Node) {
					check(name)
					readKeys(pool, []string{"nodes"})
				})
			}
		})
	}
	if n, _ := topLevel(path, root, "driver"); mapping(n) {
		readKeys(n, []string{"policy_model"})
	}
	if n, _ := topLevel(path, root, "job"); mapping(n) {
		readKeys(n, []string{"output_path"})
	}
	if found != nil {
		return fmt.Errorf("%s:%d: %q is an unresolved interpolation: stage the resolved config (OmegaConf.to_yaml(cfg, resolve=True))", path, found.Line, found.Value)
	}
	return nil
}

// suggestType is ` (did you mean "vllm"?)` for a service type that is a
// known one in other case or a near misspelling, else "".
func suggestType(t string) string {
	known := []string{typeVLLM, typeVLLMPD, typeRay}
	for _, k := range known {
		if strings.EqualFold(t, k) {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
	}
	if c, ok := Closest(strings.ToLower(t), known); ok {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}
