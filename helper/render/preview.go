package render

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Placeholder texts of a preview (Preview): values only the node knows,
// written in angle brackets so that no reader takes them for real ones. Each
// stays a valid YAML scalar (no ": " inside) and a valid OTTL string.
const (
	// PlaceholderJobID stands for the Slurm job id (S_JOB_ID).
	PlaceholderJobID = "<job-id>"
	// PlaceholderNode stands for the node's name (SLURMD_NODENAME).
	PlaceholderNode = "<node>"
	// PlaceholderHeadNode stands for the job's head node (the first node
	// of SLURM_JOB_NODELIST, where the batch script runs).
	PlaceholderHeadNode = "<head-node>"
	// PlaceholderCluster stands for SLURM_CLUSTER_NAME on the node.
	PlaceholderCluster = "<slurm-cluster>"
	// PlaceholderRestartCount stands for SLURM_JOB_RESTART_COUNT (0 for
	// the first run), an Int.
	PlaceholderRestartCount = "<restart-count>"
	// PlaceholderSLUID stands for SLURM_JOB_SLUID (Slurm 25.11 and later).
	PlaceholderSLUID = "<sluid>"
	// PlaceholderJobUUID and PlaceholderRunUUID stand for Lens'
	// nv.dl.job.uuid and nv.dl.run.uuid, derived from the values above.
	PlaceholderJobUUID = "<job-uuid>"
	PlaceholderRunUUID = "<run-uuid>"
	// PlaceholderOTLPGRPC, PlaceholderOTLPHTTP, PlaceholderHealth,
	// PlaceholderTelemetry, PlaceholderFinal and PlaceholderPlugin stand
	// for the loopback ports chosen at job start (Ports).
	PlaceholderOTLPGRPC  = "<otlp-grpc-port>"
	PlaceholderOTLPHTTP  = "<otlp-http-port>"
	PlaceholderHealth    = "<health-port>"
	PlaceholderTelemetry = "<telemetry-port>"
	PlaceholderFinal     = "<final-port>"
	PlaceholderPlugin    = "<plugin-port>"
)

// PreviewTag starts every line of the comment block a preview adds on top
// of the configuration: what the node writes follows that block.
const PreviewTag = "# PREVIEW"

// placeholderMeanings lists every placeholder with what the node fills in,
// in the order of the preview's comment block.
var placeholderMeanings = []struct{ text, meaning string }{
	{PlaceholderJobID, "the Slurm job id"},
	{PlaceholderNode, "the node's name (host.name, scrape instance labels, a non-first node's output dir)"},
	{PlaceholderHeadNode, "the job's first node, where the batch script runs (slurm.head_node.name)"},
	{PlaceholderCluster, "SLURM_CLUSTER_NAME on the node"},
	{PlaceholderRestartCount, "SLURM_JOB_RESTART_COUNT, 0 for the first run (an integer)"},
	{PlaceholderSLUID, "SLURM_JOB_SLUID; these lines are absent before Slurm 25.11"},
	{PlaceholderJobUUID, "nv.dl.job.uuid, a UUID derived from the cluster and job id"},
	{PlaceholderRunUUID, "nv.dl.run.uuid, a UUID derived from the cluster, job id and restart count"},
	{PlaceholderOTLPGRPC, "a free 127.0.0.1 port chosen at job start (OTLP gRPC receiver)"},
	{PlaceholderOTLPHTTP, "a free 127.0.0.1 port chosen at job start (OTLP HTTP receiver)"},
	{PlaceholderHealth, "a free 127.0.0.1 port chosen at job start (health check)"},
	{PlaceholderTelemetry, "a free 127.0.0.1 port chosen at job start (the collector's own metrics, an integer)"},
	{PlaceholderFinal, "the supervisor's 127.0.0.1 port that receives the collector's final figures at shutdown"},
	{PlaceholderPlugin, "a free 127.0.0.1 port chosen at job start (the OTLP HTTP receiver of the supervisor's phase spans)"},
}

// Sentinel ports rendered in place of unknown ones, then replaced by their
// placeholders where Render writes ports: after "127.0.0.1:" and as
// "port: ". Only the ports that are unknown are replaced, so a port given
// by the caller is shown as given.
const (
	sentinelOTLPGRPC = 65530 + iota
	sentinelOTLPHTTP
	sentinelHealth
	sentinelTelemetry
	sentinelFinal
	sentinelPlugin
)

var (
	// resource/identity's actions (identityActions): "- key: K", then
	// "value: V" on the next line.
	restartLine = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(- key: (?:slurm_job_restart_count|` + regexp.QuoteMeta(LensRestartCount) + `)\n +value: )0\n`)
	})
	jobUUIDLine = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(- key: ` + regexp.QuoteMeta(LensJobUUID) + `\n +value: )"[0-9a-f-]{36}"`)
	})
	runUUIDLine = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(- key: ` + regexp.QuoteMeta(LensRunUUID) + `\n +value: )"[0-9a-f-]{36}"`)
	})
)

// Preview renders what Render renders for in, except that what only the
// node knows is shown as a placeholder: a port of 0 (OTLPGRPC, OTLPHTTP,
// Health, Telemetry: a node never turns the telemetry port off) is its
// placeholder, Final always is (the supervisor always has one), and Job fields holding a placeholder text (JobID, Node,
// SlurmCluster, RestartCount, SLUID) are placeholders, as are the Lens
// UUIDs derived from them. OutputDir may hold placeholders too. The YAML
// starts with a comment block (each line starting with PreviewTag)
// listing every placeholder it holds and its meaning; the rest is, byte for
// byte, what the node writes once the placeholders are filled in. Errors
// are Render's.
func Preview(in Input) ([]byte, error) {
	type swap struct {
		sentinel int
		text     string
	}
	var ports []swap
	for _, p := range []struct {
		port     *int
		sentinel int
		text     string
	}{
		{&in.Ports.OTLPGRPC, sentinelOTLPGRPC, PlaceholderOTLPGRPC},
		{&in.Ports.OTLPHTTP, sentinelOTLPHTTP, PlaceholderOTLPHTTP},
		{&in.Ports.Health, sentinelHealth, PlaceholderHealth},
		{&in.Ports.Telemetry, sentinelTelemetry, PlaceholderTelemetry},
		{&in.Ports.Final, sentinelFinal, PlaceholderFinal},
		{&in.Ports.Plugin, sentinelPlugin, PlaceholderPlugin},
	} {
		if *p.port == 0 || p.sentinel == sentinelFinal {
			*p.port = p.sentinel
			ports = append(ports, swap{p.sentinel, p.text})
		}
	}
	restart := in.Job.RestartCount == PlaceholderRestartCount
	if restart {
		in.Job.RestartCount = "0"
	}
	y, err := Render(in)
	if err != nil {
		return nil, err
	}
	s := string(y)
	for _, p := range ports {
		s = strings.ReplaceAll(s, "127.0.0.1:"+strconv.Itoa(p.sentinel), "127.0.0.1:"+p.text)
		s = strings.ReplaceAll(s, "port: "+strconv.Itoa(p.sentinel)+"\n", "port: "+p.text+"\n")
	}
	if restart {
		s = restartLine().ReplaceAllString(s, "${1}"+PlaceholderRestartCount+"\n")
	}
	j := in.Job
	if j.JobID == PlaceholderJobID || j.SlurmCluster == PlaceholderCluster || j.ArrayJobID == PlaceholderJobID {
		s = jobUUIDLine().ReplaceAllString(s, `${1}"`+PlaceholderJobUUID+`"`)
		s = runUUIDLine().ReplaceAllString(s, `${1}"`+PlaceholderRunUUID+`"`)
	} else if restart {
		s = runUUIDLine().ReplaceAllString(s, `${1}"`+PlaceholderRunUUID+`"`)
	}
	var head strings.Builder
	head.WriteString(PreviewTag + ": the job's collector.yaml as each node writes it, with these placeholders\n")
	head.WriteString(PreviewTag + ": filled in there (values only the node knows):\n")
	n := 0
	for _, p := range placeholderMeanings {
		if strings.Contains(s, p.text) {
			fmt.Fprintf(&head, "%s:   %-17s %s\n", PreviewTag, p.text, p.meaning)
			n++
		}
	}
	if n == 0 {
		head.Reset()
	}
	return []byte(head.String() + s), nil
}

// PreviewPlaceholders returns the placeholder texts Preview may write, in
// the order of its comment block.
func PreviewPlaceholders() []string {
	out := make([]string, len(placeholderMeanings))
	for i, p := range placeholderMeanings {
		out[i] = p.text
	}
	return out
}
