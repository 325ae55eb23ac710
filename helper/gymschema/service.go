package gymschema

import (
	"fmt"
	"strings"
)

// Known service types of Gym's submit schema: the ones whose endpoints
// the plugin scrapes.
const (
	// TypeVLLM is a vLLM engine (vllm serve).
	TypeVLLM = "vllm"
	// TypeVLLMPD is a prefill/decode pair of vLLM tiers behind a vllm-router.
	TypeVLLMPD = "vllm_pd"
	// TypeRay is a Ray cluster (ray start on its nodes).
	TypeRay = "ray"
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

// PortKey is the config path of the endpoint's port, for messages:
// services.<name>.port, or services.<name>.prefill.port (.decode.port) for
// a tier of a vllm_pd service.
func (s Service) PortKey() string {
	switch s.Role {
	case RoleRouter:
		return "services." + s.Name + " (its vllm-router's Prometheus port)"
	case RoleRay:
		return "services." + s.Name + ".extra_args --metrics-export-port"
	}
	if s.Type == TypeVLLMPD {
		for _, t := range []string{"prefill", "decode"} {
			if base, ok := strings.CutSuffix(s.Name, "-"+t); ok {
				return "services." + base + "." + t + ".port"
			}
		}
	}
	return "services." + s.Name + ".port"
}

// SharedNode reports whether two endpoints' node sets (empty: every node)
// share a node, and names it for messages.
func SharedNode(a, b []int) (string, bool) {
	switch {
	case len(a) == 0 && len(b) == 0:
		return "every node", true
	case len(a) == 0:
		return fmt.Sprintf("node %d of the job", b[0]), true
	case len(b) == 0:
		return fmt.Sprintf("node %d of the job", a[0]), true
	}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return fmt.Sprintf("node %d of the job", x), true
			}
		}
	}
	return "", false
}
