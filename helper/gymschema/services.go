package gymschema

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"gopkg.in/yaml.v3"
)

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

// layout is the job's node pools as services are placed on them, and what
// the placing found: the endpoints, notes and errors.
type layout struct {
	path  string
	pools []nodePool
	total int // nodes in all pools; 0 when there are none
	out   []Service
	notes []string
	errs  []error
}

// poolRange is the first node index and node count of the pool name.
func (l *layout) poolRange(name string) (int, int, bool) {
	for _, p := range l.pools {
		if p.name == name {
			return p.start, p.count, true
		}
	}
	return 0, 0, false
}

// known names the declared pools for messages.
func (l *layout) known() string {
	var names []string
	for _, p := range l.pools {
		names = append(names, p.name)
	}
	if len(names) == 0 {
		return "none declared"
	}
	return strings.Join(names, ", ")
}

// unknownPool records the error of a node_pool (at key, on line) that is
// not a declared pool.
func (l *layout) unknownPool(line int, key, pool string) {
	l.errs = append(l.errs, fmt.Errorf("%s:%d: %s: %q is not a pool of compute.<cluster>.node_pools (%s)", l.path, line, key, pool, l.known()))
}

// place is the node indexes where the engine s serves /metrics; nil for
// every node (no pools) or for an unknown pool (an error recorded).
func (l *layout) place(s *gymService, line int) []int {
	first, count := 0, l.total
	if s.hasPool {
		var found bool
		first, count, found = l.poolRange(s.nodePool)
		if !found {
			l.unknownPool(line, s.key+".node_pool", s.nodePool)
			return nil
		}
	} else if l.total == 0 {
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

// engine adds the vLLM engine s (a vllm service or a vllm_pd tier).
func (l *layout) engine(s *gymService, line int) {
	nodes := l.place(s, line)
	if s.hasPool && nodes == nil {
		return
	}
	l.out = append(l.out, Service{Name: s.name, Type: s.typ, Port: s.port, Model: s.model,
		ServedModelName: s.served, Nodes: nodes})
}

// tiers adds the prefill and decode engines of the vllm_pd service s
// (whose mapping is on line): each a vllm serve on its own pool, on the
// service's port + 1 and + 2 unless it says its own.
func (l *layout) tiers(s *gymService, line int) {
	for _, t := range []struct {
		suffix string
		node   *yaml.Node
		off    int
	}{{"prefill", s.prefill, 1}, {"decode", s.decode, 2}} {
		tier := &gymService{name: s.name + "-" + t.suffix, key: s.key + "." + t.suffix, typ: TypeVLLMPD,
			port: s.port + t.off, model: s.model, served: s.served, serverPerNode: s.serverPerNode}
		if t.node == nil || t.node.Kind != yaml.MappingNode {
			l.notes = append(l.notes, fmt.Sprintf("%s:%d: %s.%s: missing, so %s is not scraped", l.path, line, s.key, t.suffix, tier.name))
			continue
		}
		if err := readService(l.path, t.node, tier, s); err != nil {
			l.errs = append(l.errs, err)
			continue
		}
		if !tier.hasPool {
			// Gym refuses this config (api.py, SubmitConfig: "a
			// prefill/decode tier without a node_pool"): each tier
			// needs nodes of its own.
			l.errs = append(l.errs, fmt.Errorf("%s:%d: %s.node_pool: not set: each tier of a vllm_pd service needs a pool of its own in compute.<cluster>.node_pools (gym eval submit refuses a tier without one)", l.path, t.node.Line, tier.key))
			continue
		}
		l.engine(tier, t.node.Line)
	}
}

// router is the endpoint of the vllm-router of the vllm_pd service s:
// vllm_router_* on its own Prometheus port, on every node of its pool when
// pinned, else on the driver's node. ok is false for an unknown pool (an
// error recorded).
func (l *layout) router(s *gymService, driver int) (Service, bool) {
	r := Service{Name: s.name, Type: TypeVLLMPD, Port: RouterMetricsPort, Model: s.model,
		ServedModelName: s.served, Role: RoleRouter}
	switch {
	case s.hasPool:
		// A pinned router's srun spans its pool: a router on each node.
		first, count, ok := l.poolRange(s.nodePool)
		if !ok {
			l.unknownPool(s.line, s.key+".node_pool", s.nodePool)
			return r, false
		}
		for i := 0; i < count; i++ {
			r.Nodes = append(r.Nodes, first+i)
		}
	case l.total > 0:
		r.Nodes = []int{driver}
	}
	return r, true
}

// ray is the metrics export endpoint of the ray service s: the head
// beside the driver, every other node of its node_pools a worker. ok is
// false when Ray's port is not known (a note recorded).
func (l *layout) ray(s *gymService, driver int) (Service, bool) {
	port, note := rayMetricsPort(l.path, s)
	if note != "" {
		l.notes = append(l.notes, note)
		return Service{}, false
	}
	r := Service{Name: s.name, Type: TypeRay, Port: port, Role: RoleRay}
	if l.total > 0 {
		// Workers are started with the head's extra_args (only --port,
		// --redis-shard-ports and --include-dashboard are dropped there).
		set := map[int]bool{driver: true}
		for _, name := range rayPoolNames(s) {
			first, count, ok := l.poolRange(name)
			if !ok {
				l.unknownPool(s.rayPools.Line, s.key+".node_pools", name)
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
	return r, true
}

// optional adds the endpoint o unless another endpoint of its node already
// serves its port (the engine's is scraped): two routers on one node, or
// Ray's port on a model's, cannot both bind it; a note says so.
func (l *layout) optional(o Service) {
	for _, e := range l.out {
		if n, ok := SharedNode(o.Nodes, e.Nodes); ok && e.Port == o.Port {
			l.notes = append(l.notes, fmt.Sprintf("%s: %s: the same port as %s, so it is not scraped", l.path, o.PortKey(), fmt.Sprintf("%s (%d on %s)", e.PortKey(), e.Port, n)))
			return
		}
	}
	l.out = append(l.out, o)
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
	l := &layout{path: path, pools: pools}
	for _, p := range pools {
		l.total += p.count
	}
	// The router of a vllm_pd service and the ray services are placed
	// after every service is read: they run on the driver's node, which
	// the policy's pool decides.
	var routers, rays []*gymService
	servicePool := map[string]*gymService{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name, body := n.Content[i].Value, n.Content[i+1]
		if body.Kind != yaml.MappingNode {
			l.errs = append(l.errs, fmt.Errorf("%s:%d: services.%s: expected a mapping", path, body.Line, name))
			continue
		}
		s := &gymService{name: name, key: "services." + name, port: 8000, line: body.Line}
		if err := readService(path, body, s, nil); err != nil && (s.typ == TypeVLLM || s.typ == TypeVLLMPD) {
			// Only what is scraped must be well formed; a ray or unknown
			// service's keys are Gym's business.
			l.errs = append(l.errs, err)
			continue
		}
		servicePool[name] = s
		models[name] = s.served
		if models[name] == "" {
			models[name] = s.model
		}
		switch s.typ {
		case TypeVLLM:
			l.engine(s, body.Line)
		case TypeVLLMPD:
			// The router <name> fronts the tiers: its API on the service's
			// port, vllm_router_* on its own Prometheus port.
			routers = append(routers, s)
			l.tiers(s, body.Line)
		case TypeRay:
			// A Ray cluster: its port is Ray's GCS, not Prometheus text;
			// Ray's metrics agent serves only at --metrics-export-port.
			rays = append(rays, s)
		case "":
			l.notes = append(l.notes, fmt.Sprintf("%s:%d: services.%s has no type, so it is not scraped", path, body.Line, name))
		default:
			l.notes = append(l.notes, fmt.Sprintf("%s:%d: services.%s: type %q is not one this plugin knows (vllm, vllm_pd, ray), so it is not scraped%s", path, body.Line, name, s.typ, suggestType(s.typ)))
		}
	}
	// The driver runs on the policy's pool's first node when the policy is
	// pinned, else on node 0 (slurm_script.py _driver_node).
	driver := 0
	if p := servicePool[policy]; p != nil && p.hasPool {
		if first, _, ok := l.poolRange(p.nodePool); ok {
			driver = first
		}
	}
	var optional []Service
	for _, s := range routers {
		if r, ok := l.router(s, driver); ok {
			optional = append(optional, r)
		}
	}
	for _, s := range rays {
		if r, ok := l.ray(s, driver); ok {
			optional = append(optional, r)
		}
	}
	for _, o := range optional {
		l.optional(o)
	}
	sort.SliceStable(l.out, func(a, b int) bool { return l.out[a].Name < l.out[b].Name })
	return l.out, models, l.notes, errors.Join(l.errs...)
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
			p, err := parsePort(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			s.port = p
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

// suggestType is ` (did you mean "vllm"?)` for a service type that is a
// known one in other case or a near misspelling, else "".
func suggestType(t string) string {
	known := []string{TypeVLLM, TypeVLLMPD, TypeRay}
	for _, k := range known {
		if strings.EqualFold(t, k) {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
	}
	if c, ok := yamlnode.Closest(strings.ToLower(t), known); ok {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}

// portKind names a service's port in messages, as package config names
// the otel: block's ports.
const portKind = "port number (an integer 1..65535, or null to skip)"

// parsePort reads a service's port: a plain YAML integer 1..65535 (an
// alias is followed); null, a quoted number or a list is an error.
func parsePort(n *yaml.Node) (int, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("expected a %s, got a %s", portKind, yamlnode.KindName(n))
	}
	if n.Tag == "!!null" {
		return 0, fmt.Errorf("null is not allowed here; remove the key to get the default, or set a %s", portKind)
	}
	if n.Tag != "!!int" {
		return 0, fmt.Errorf("expected %s, got %s", portKind, yamlnode.DescribeScalar(n))
	}
	i, err := strconv.Atoi(n.Value)
	if err != nil {
		return 0, fmt.Errorf("expected %s, got %q", portKind, n.Value)
	}
	if i < 1 || i > 65535 {
		return 0, fmt.Errorf("%d is out of range %d..%d", i, 1, 65535)
	}
	return i, nil
}
