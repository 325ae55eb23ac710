// Package gymschema reads what the plugin needs from a resolved NeMo Gym
// submit config (gym eval submit's schema): the keys of its otel: block,
// its services placed on the job's nodes as Gym's Slurm executor places
// them (docs/gym-contract.md), the policy model, gym_install, the output
// path and the cluster. The otel: block's values are typed by package
// config, which calls Parse with its own reader of the block.
package gymschema

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/yamlnode"
	"gopkg.in/yaml.v3"
)

// OtelKeys are the keys of the otel: block in NeMo Gym's own submit
// schema (the 14 keys of the seed, and the two of Gym's published
// executor for its local copy's node_exporter series). Gym's config models forbid every other
// key, so the plugin's own keys (on_failure, memory_limit_mib, ...) come
// from the site file, plugstack.conf or the --gym-otel SPEC, never from a
// Gym config.
var OtelKeys = []string{
	"enabled", "endpoint", "service_name", "token_env", "binary", "container",
	"component", "gym_telemetry", "gym_span_groups", "gym_logs",
	"gpu_metrics_port", "node_metrics_port", "scrape_interval_seconds",
	"health_check_timeout_seconds",
	// Gym's published executor (docs.nvidia.com/nemo/gym v0.3.0,
	// nemo_gym.orchestration.executors.otel): the node_exporter series its
	// local metrics.jsonl keeps.
	"local_node_metrics", "local_node_metrics_extra",
}

// otelDefaults are the defaults of Gym's OtelConfig (NVIDIA-NeMo/Gym
// nemo_gym/orchestration/api.py at 8252f8e85280e668a52c3af68167b838e8d03e5f)
// as YAML scalars ("null" for None), for the keys a deployment sets in its
// shared cluster fragment (the seed: endpoint, service_name, token_env,
// binary; and container). A model_dump of Gym's config writes every
// default, so such a value says nothing the user chose and the site's value
// holds. The job's own tuning keys (scrape interval, ports, span groups,
// ...) are not here: Gym's executor uses whatever its config says, default
// or not, and so does the plugin. enabled is never here.
var otelDefaults = map[string]string{
	"binary": "otelcol-contrib", "container": "null", "endpoint": "null",
	"token_env": "OTEL_TOKEN", "service_name": "null",
}

// IsDefault reports whether v, the value of Gym otel key k in a Gym
// config, is Gym's own default for k.
func IsDefault(k string, v *yaml.Node) bool {
	d, ok := otelDefaults[k]
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

// IsOtelKey reports whether k is a key of Gym's otel: block (OtelKeys).
func IsOtelKey(k string) bool {
	for _, g := range OtelKeys {
		if g == k {
			return true
		}
	}
	return false
}

// Config is what the plugin reads from a resolved NeMo Gym submit config,
// but its otel: block (typed by package config). Other keys are ignored,
// whatever Gym adds.
type Config struct {
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

// Parse reads the resolved Gym submit config whose top-level mapping is
// root (read from path, which messages name). otel reads the otel: block
// (nil when absent) and returns its notes and error; it is called once,
// unless the block's key is duplicated. Every problem is returned
// (joined), each naming its key path and line; what is only ignored is in
// Notes, in the order of the file's sections (otel, compute, services).
// The Config is never nil.
func Parse(path string, root *yaml.Node, otel func(*yaml.Node) ([]string, error)) (*Config, error) {
	g := &Config{}
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
	if n, err := yamlnode.Lookup(path, root, "otel"); err != nil {
		add(err)
	} else {
		notes, err := otel(n)
		g.Notes = append(g.Notes, notes...)
		add(err)
	}
	var pools []nodePool
	var err error
	if n, _ := yamlnode.Lookup(path, root, "compute"); n != nil && n.Tag != "!!null" {
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
	if n, _ := yamlnode.Lookup(path, root, "driver"); n != nil && n.Kind == yaml.MappingNode {
		if gi, _ := yamlnode.Lookup(path, n, "gym_install"); gi != nil && gi.Tag != "!!null" {
			g.GymInstall = !(gi.Kind == yaml.ScalarNode && (gi.Value == "" || gi.Value == "false"))
		}
		if pm, _ := yamlnode.Lookup(path, n, "policy_model"); pm != nil && pm.Kind == yaml.ScalarNode && pm.Tag != "!!null" {
			policy = pm.Value
		}
	}
	if n, _ := yamlnode.Lookup(path, root, "services"); n != nil {
		var notes []string
		var models map[string]string
		g.Services, models, notes, err = parseServices(path, n, pools, policy)
		g.Notes = append(g.Notes, notes...)
		g.PolicyModel = models[policy]
		add(err)
	}
	if n, _ := yamlnode.Lookup(path, root, "job"); n != nil && n.Kind == yaml.MappingNode {
		if op, _ := yamlnode.Lookup(path, n, "output_path"); op != nil && op.Tag != "!!null" {
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
	t, _ := yamlnode.Lookup(path, c, "type")
	if t == nil || t.Kind != yaml.ScalarNode || t.Tag == "!!null" {
		return ""
	}
	return t.Value
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
	np, _ := yamlnode.Lookup(path, c, "node_pools")
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
			if nv, _ := yamlnode.Lookup(path, body, "nodes"); nv != nil {
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
		return 0, fmt.Errorf("expected an integer, got %s", yamlnode.Describe(v))
	}
	i, err := strconv.Atoi(v.Value)
	if err != nil || i < min || i > max {
		return 0, fmt.Errorf("%s is out of range %d..%d", v.Value, min, max)
	}
	return i, nil
}

func describeNode(v *yaml.Node) string {
	if v.Kind == yaml.ScalarNode {
		return yamlnode.DescribeScalar(v)
	}
	return "a " + yamlnode.KindName(v)
}

// readServiceKeys are the keys of a service (or vllm_pd tier) whose
// values the plugin reads; an interpolation elsewhere is Gym's business.
var readServiceKeys = []string{"type", "port", "model", "served_model_name", "node_pool", "server_per_node"}

// checkInterpolations reports the first OmegaConf interpolation left in a
// value this plugin reads: the Gym keys of otel: (OtelKeys), the keys of
// readServiceKeys of every service and vllm_pd tier, the compute
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
	if n, _ := yamlnode.Lookup(path, root, "otel"); n != nil {
		check(n)
		readKeys(n, OtelKeys)
	}
	if n, _ := yamlnode.Lookup(path, root, "services"); n != nil {
		pairs(n, func(_, svc *yaml.Node) {
			readKeys(svc, readServiceKeys)
			pairs(svc, func(k, v *yaml.Node) {
				if k.Value == "prefill" || k.Value == "decode" {
					readKeys(v, readServiceKeys)
				}
			})
		})
	}
	if n, _ := yamlnode.Lookup(path, root, "compute"); n != nil {
		pairs(n, func(k, c *yaml.Node) {
			check(k)
			readKeys(c, []string{"type"})
			if np, _ := yamlnode.Lookup(path, c, "node_pools"); np != nil && mapping(c) {
				pairs(np, func(name, pool *yaml.Node) {
					check(name)
					readKeys(pool, []string{"nodes"})
				})
			}
		})
	}
	if n, _ := yamlnode.Lookup(path, root, "driver"); mapping(n) {
		readKeys(n, []string{"policy_model"})
	}
	if n, _ := yamlnode.Lookup(path, root, "job"); mapping(n) {
		readKeys(n, []string{"output_path"})
	}
	if found != nil {
		return fmt.Errorf("%s:%d: %q is an unresolved interpolation: stage the resolved config (OmegaConf.to_yaml(cfg, resolve=True))", path, found.Line, found.Value)
	}
	return nil
}
