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
	// Role is "" for a vLLM engine (a vllm service or a vllm_pd tier),
	// RoleRouter for the vllm-router of a vllm_pd service (Port is its
	// Prometheus port, not its API port) and RoleRay for the metrics
	// export port of a ray service's nodes. The scrape job of a service
	// with a role carries the labels gym_service=<Name> and role=<Role>.
	Role string `json:"role,omitempty"`
}

// Roles of the endpoints that are not vLLM engines (Service.Role).
const (
	// RoleRouter is the Prometheus port of a vllm_pd service's
	// vllm-router, which serves vllm_router_* there and not on its API
	// port.
	RoleRouter = "router"
	// RoleRay is a ray service's metrics export port (ray start
	// --metrics-export-port), served by Ray's metrics agent on every node
	// of the Ray cluster.
	RoleRay = "ray"
)

// RouterMetricsPort is vllm-router's default Prometheus port
// (--prometheus-port, default 29000, bound to --prometheus-host,
// default 127.0.0.1: vllm-project/router src/main.rs at
// 03e9af5c1982f7568d79021d80d812edecb2d702). Gym's executor starts the
// router without either flag and its config has no key for them
// (docs/gym-contract.md section 7), so this is where every Gym router
// serves vllm_router_*: on 127.0.0.1 of the router's own node, which the
// node's collector reaches.
const RouterMetricsPort = 29000

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
	switch s.Role {
	case RoleRouter:
		return "services." + s.Name + " (its vllm-router's Prometheus port)"
	case RoleRay:
		return "services." + s.Name + ".extra_args --metrics-export-port"
	}
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
		g.Services, models, notes, err = parseServices(path, n, pools, policy)
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
	var errs []error
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
			if known, ok := NearMiss(k.Value); ok {
				// One letter off a known key is a typo, not a key of a
				// later Gym: ignoring it would run the job on the
				// known key's default.
				errs = append(errs, nearMissError(path, k, v, known))
				continue
			}
			hint := ""
			if c, ok := Closest(k.Value, GymOtelKeys); ok {
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
		val = "a " + nodeKindName(v)
	}
	where := ""
	if !isGymOtelKey(known) {
		where = fmt.Sprintf("; otel.%s itself is not read from a Gym config either: set it in the site file or as the --gym-otel item %s=<value>", known, known)
	}
	return fmt.Errorf("%s:%d: otel.%s: %s: unknown key, one letter from otel.%s (did you mean %q?): as it is, the value is not used%s", path, k.Line, k.Value, val, known, known, where)
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
	extraArgs       *yaml.Node // a ray service's extra_args
	rayPools        *yaml.Node // a ray service's node_pools
	line            int
}

// parseServices reads services: and places each endpoint on the job's
// nodes as Gym's Slurm executor does (docs/gym-contract.md, "Where Gym
// runs what"). policy is driver.policy_model, whose pool decides the
// driver's node (the vllm_pd router and the ray head run there). It
// returns the endpoints sorted by name, each service's model name (for
// driver.policy_model), and notes for services not scraped.
func parseServices(path string, n *yaml.Node, pools []nodePool, policy string) ([]Service, map[string]string, []string, error) {
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
	poolRange := func(name string) (int, int, bool) {
		for _, p := range pools {
			if p.name == name {
				return p.start, p.count, true
			}
		}
		return 0, 0, false
	}
	known := func() string {
		var names []string
		for _, p := range pools {
			names = append(names, p.name)
		}
		if len(names) == 0 {
			return "none declared"
		}
		return strings.Join(names, ", ")
	}
	place := func(s *gymService, line int) []int {
		first, count := 0, total
		if s.hasPool {
			var found bool
			first, count, found = poolRange(s.nodePool)
			if !found {
				errs = append(errs, fmt.Errorf("%s:%d: %s.node_pool: %q is not a pool of compute.<cluster>.node_pools (%s)", path, line, s.key, s.nodePool, known()))
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
	// The router of a vllm_pd service and the ray services are placed
	// after every service is read: they run on the driver's node, which
	// the policy's pool decides.
	var routers, rays []*gymService
	servicePool := map[string]*gymService{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, body := n.Content[i].Value, n.Content[i+1]
		if body.Kind != yaml.MappingNode {
			errs = append(errs, fmt.Errorf("%s:%d: services.%s: expected a mapping", path, body.Line, name))
			continue
		}
		s := &gymService{name: name, key: "services." + name, port: 8000, line: body.Line}
		if err := readService(path, body, s, nil); err != nil && (s.typ == typeVLLM || s.typ == typeVLLMPD) {
			// Only what is scraped must be well formed; a ray or unknown
			// service's keys are Gym's business.
			errs = append(errs, err)
			continue
		}
		servicePool[name] = s
		models[name] = s.served
		if models[name] == "" {
			models[name] = s.model
		}
		switch s.typ {
		case typeVLLM:
			emit(s, body.Line)
		case typeVLLMPD:
			// The router <name> fronts the tiers: its API on the service's
			// port, vllm_router_* on its own Prometheus port; each tier is
			// a vllm serve on its own pool.
			routers = append(routers, s)
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
			// A Ray cluster: its port is Ray's GCS, not Prometheus text;
			// Ray's metrics agent serves only at --metrics-export-port.
			rays = append(rays, s)
		case "":
			notes = append(notes, fmt.Sprintf("%s:%d: services.%s has no type, so it is not scraped", path, body.Line, name))
		default:
			notes = append(notes, fmt.Sprintf("%s:%d: services.%s: type %q is not one this plugin knows (vllm, vllm_pd, ray), so it is not scraped%s", path, body.Line, name, s.typ, suggestType(s.typ)))
		}
	}
	// The driver runs on the policy's pool's first node when the policy is
	// pinned, else on node 0 (slurm_script.py _driver_node).
	driver := 0
	if p := servicePool[policy]; p != nil && p.hasPool {
		if first, _, ok := poolRange(p.nodePool); ok {
			driver = first
		}
	}
	var optional []Service
	for _, s := range routers {
		r := Service{Name: s.name, Type: typeVLLMPD, Port: RouterMetricsPort, Model: s.model,
			ServedModelName: s.served, Role: RoleRouter}
		switch {
		case s.hasPool:
			// A pinned router's srun spans its pool: a router on each node.
			first, count, ok := poolRange(s.nodePool)
			if !ok {
				errs = append(errs, fmt.Errorf("%s:%d: %s.node_pool: %q is not a pool of compute.<cluster>.node_pools (%s)", path, s.line, s.key, s.nodePool, known()))
				continue
			}
			for i := 0; i < count; i++ {
				r.Nodes = append(r.Nodes, first+i)
			}
		case total > 0:
			r.Nodes = []int{driver}
		}
		optional = append(optional, r)
	}
	for _, s := range rays {
		port, note := rayMetricsPort(path, s)
		if note != "" {
			notes = append(notes, note)
			continue
		}
		r := Service{Name: s.name, Type: typeRay, Port: port, Role: RoleRay}
		if total > 0 {
			// The head beside the driver; every other node of its
			// node_pools a worker, started with the same extra_args
			// (only --port, --redis-shard-ports and --include-dashboard
			// are dropped there).
			set := map[int]bool{driver: true}
			for _, name := range rayPoolNames(s) {
				first, count, ok := poolRange(name)
				if !ok {
					errs = append(errs, fmt.Errorf("%s:%d: %s.node_pools: %q is not a pool of compute.<cluster>.node_pools (%s)", path, s.rayPools.Line, s.key, name, known()))
					continue
				}
				for i := 0; i < count; i++ {
					set[first+i] = true
				}
			}
			for idx := range set {
				r.Nodes = append(r.Nodes, idx)
			}
			sort.Ints(r.Nodes)
		}
		optional = append(optional, r)
	}
	// An optional endpoint on a port another endpoint of its node already
	// serves is left out with a note (the engine's is scraped): two
	// routers on one node, or Ray's port on a model's, cannot both bind it.
	for _, o := range optional {
		clash := ""
		for _, e := range out {
			if n, ok := sharedNode(o.Nodes, e.Nodes); ok && e.Port == o.Port {
				clash = fmt.Sprintf("%s (%d on %s)", e.portKey(), e.Port, n)
				break
			}
		}
		if clash != "" {
			notes = append(notes, fmt.Sprintf("%s: %s: the same port as %s, so it is not scraped", path, o.portKey(), clash))
			continue
		}
		out = append(out, o)
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, models, notes, errors.Join(errs...)
}

// rayMetricsPort reads --metrics-export-port from a ray service's
// extra_args (Gym appends them verbatim to ray start on the head and on
// every worker). Without the flag Ray picks a random port, so nothing is
// scraped; the note says why.
func rayMetricsPort(path string, s *gymService) (int, string) {
	if s.extraArgs == nil || s.extraArgs.Kind != yaml.ScalarNode || s.extraArgs.Tag == "!!null" {
		return 0, fmt.Sprintf("%s:%d: %s: Ray serves its metrics only at a port given as --metrics-export-port in %s.extra_args (ray start picks a random one otherwise), so this Ray cluster is not scraped", path, s.line, s.key, s.key)
	}
	fields := strings.Fields(s.extraArgs.Value)
	val, found := "", false
	for i, f := range fields {
		if f == "--metrics-export-port" && i+1 < len(fields) {
			val, found = fields[i+1], true
		} else if v, ok := strings.CutPrefix(f, "--metrics-export-port="); ok {
			val, found = v, true
		}
	}
	if !found {
		return 0, fmt.Sprintf("%s:%d: %s: Ray serves its metrics only at a port given as --metrics-export-port in %s.extra_args (ray start picks a random one otherwise), so this Ray cluster is not scraped", path, s.extraArgs.Line, s.key, s.key)
	}
	port, err := strconv.Atoi(strings.Trim(val, `'"`))
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Sprintf("%s:%d: %s.extra_args: --metrics-export-port %q is not a port number (1-65535), so this Ray cluster is not scraped", path, s.extraArgs.Line, s.key, val)
	}
	return port, ""
}

// rayPoolNames are the names in a ray service's node_pools list.
func rayPoolNames(s *gymService) []string {
	if s.rayPools == nil || s.rayPools.Kind != yaml.SequenceNode {
		return nil
	}
	var names []string
	for _, c := range s.rayPools.Content {
		if c.Kind == yaml.ScalarNode {
			names = append(names, c.Value)
		}
	}
	return names
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
		case "extra_args":
			s.extraArgs = v
		case "node_pools":
			s.rayPools = v
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
