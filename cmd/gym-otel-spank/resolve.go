package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

// inputFlags are the flags every command that resolves a job's settings
// takes: where the site's settings are (siteFlags, the one lookup), the
// Gym config and the SPEC.
type inputFlags struct {
	siteFlags
	config string
	spec   string
}

func (f *inputFlags) register(fs *flag.FlagSet) {
	f.siteFlags.register(fs)
	fs.StringVar(&f.config, "config", "", "the job's resolved NeMo Gym submit config `FILE` (same as config= in SPEC)")
	fs.StringVar(&f.spec, "spec", "", "the value of --gym-otel= (`SPEC`: comma-separated key=value items, \"off\", or empty)")
}

// fullSpec is the SPEC with --config as its config= item.
func (f *inputFlags) fullSpec() (string, error) {
	spec := f.spec
	if f.config != "" {
		if strings.Contains(spec, "config=") {
			return "", usageError{"give the config either with --config or as config= in --spec, not both"}
		}
		item := "config=" + config.EscapeValue(f.config)
		if spec == "" || spec == "on" {
			spec = item
		} else {
			spec = item + "," + spec
		}
	}
	return spec, nil
}

// checked is the "checked:" line of the layers f and site name.
func (f *inputFlags) checked(site siteLayers) string {
	return checkedLine(site, f.config, f.spec)
}

// resolveJob finds the site's settings (siteFlags.lookup), merges the
// layers and validates, as the submit does; checkToken also requires the
// token variable in this process's environment. Warnings go to stderr. The
// error holds every problem, the plugstack line's included, and ends with
// the checked: line; the site layers found are returned for the caller's
// own checked: line.
func (f *inputFlags) resolveJob(stderr io.Writer, checkToken bool) (*config.Resolved, siteLayers, []string, error) {
	site, plugErr := f.lookup()
	if site.Unread {
		return nil, site, nil, plugErr
	}
	spec, err := f.fullSpec()
	if err != nil {
		return nil, site, nil, err
	}
	r, warnings, err := resolveInputs(site, spec, stderr, checkToken)
	if err = errors.Join(plugErr, dropRepeats(err, plugErr)); err != nil {
		return nil, site, warnings, withChecked(err, f.checked(site))
	}
	return r, site, warnings, nil
}

// resolveInputs merges the site layers and spec (working directory: this
// process's) and validates; checkToken also requires the token variable in
// this process's environment. Warnings are printed to stderr and returned.
func resolveInputs(site siteLayers, spec string, stderr io.Writer, checkToken bool) (*config.Resolved, []string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, nil, err
	}
	in := config.Inputs{SiteFile: site.File, SiteItems: site.Items, Spec: spec, WorkDir: wd}
	var env config.LookupEnv
	if checkToken {
		env = os.LookupEnv
	}
	r, err := config.Resolve(in)
	var warnings []string
	if err != nil {
		// Every problem at once: what did resolve is validated too.
		warnings, err = config.AlsoValidate(r, in, err, env)
		r = nil
	} else {
		warnings, err = r.ValidateWhere(in, env)
	}
	for _, w := range warnings {
		fmt.Fprintf(stderr, "gym-otel: warning: %s\n", w)
	}
	return r, warnings, err
}

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", "[--plugstack FILE] [--site FILE] [--site-item KEY=VALUE...] [--config FILE] [--spec SPEC] [--no-token-check]", stderr)
	var in inputFlags
	in.register(fs)
	noToken := fs.Bool("no-token-check", false, "do not require the token variable in this environment (for checking a site file)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r, site, warnings, err := in.resolveJob(stderr, !*noToken)
	if err != nil {
		return err
	}
	valid := "valid"
	if n := len(warnings); n > 0 {
		valid = fmt.Sprintf("valid with %d %s (above)", n, plural(n, "warning"))
	}
	o := r.Otel
	if !o.Enabled {
		fmt.Fprintf(stdout, "gym-otel: %s: collector off for this job\n", valid)
		fmt.Fprintf(stdout, "gym-otel: checked: %s\n", in.checked(site))
		return nil
	}
	models, others := 0, 0
	for _, s := range r.Services {
		if s.Role == "" {
			models++
		} else {
			others++
		}
	}
	extra := ""
	if others > 0 {
		extra = fmt.Sprintf(" and %d router or Ray metrics endpoint(s)", others)
	}
	fmt.Fprintf(stdout, "gym-otel: %s: endpoint %s, service_name %s, token from $%s, %d model service(s)%s, job dir %s\n",
		valid, o.Endpoint, o.ServiceName, o.TokenEnv, models, extra, r.JobDir)
	fmt.Fprintf(stdout, "gym-otel: checked: %s\n", in.checked(site))
	return nil
}

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// dropRepeats returns err without the lines that plugErr already says
// with the plugstack line's file:line in front: a bad inline item of the
// plugin's plugstack line is found when the line is parsed and again when
// the site layers are resolved, and is one mistake. err is returned as it
// is when no line repeats.
func dropRepeats(err, plugErr error) error {
	if err == nil || plugErr == nil {
		return err
	}
	said := strings.Split(plugErr.Error(), "\n")
	var kept []string
	dropped := false
	for _, line := range strings.Split(err.Error(), "\n") {
		repeat := false
		for _, s := range said {
			if strings.HasSuffix(s, ": "+line) {
				repeat = true
				break
			}
		}
		if repeat {
			dropped = true
		} else {
			kept = append(kept, line)
		}
	}
	switch {
	case !dropped:
		return err
	case len(kept) == 0:
		return nil
	}
	return errors.New(strings.Join(kept, "\n"))
}

func runRender(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("render", "[--plugstack FILE] [--site FILE] [--site-item KEY=VALUE...] [--config FILE] [--spec SPEC] [--job-id ID] [--node NAME] [--node-index N] [--output DIR] [--gpus LIST] [--gpu-devices LIST] [--ports G,H,HEALTH,TEL]", stderr)
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprint(stderr, renderPlaceholderHelp)
	}
	var in inputFlags
	in.register(fs)
	jobID := fs.String("job-id", "", "Slurm job `ID` (default: the placeholder "+render.PlaceholderJobID+")")
	node := fs.String("node", "", "node `NAME` (default: the placeholder "+render.PlaceholderNode+")")
	nodeIndex := fs.Int("node-index", 0, "the node's position `N` in the job's node list (0: the first node)")
	output := fs.String("output", "", "output `DIR` (default: <job dir>/otel, or otel/nodes/<node> past the first node)")
	gpus := fs.String("gpus", "", "the job's GPU indexes on the node, as SLURM_JOB_GPUS (`LIST`; default: none named, every GPU kept)")
	devices := fs.String("gpu-devices", "", "the job's GPU devices on the node, as CUDA_VISIBLE_DEVICES in the prolog (`LIST`: MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>, GPU-<uuid> or indexes)")
	ports := fs.String("ports", "", "OTLP gRPC, OTLP HTTP, health and telemetry `PORTS` (default: the placeholders "+render.PlaceholderOTLPGRPC+" ...: each node chooses free 127.0.0.1 ports at job start)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var p render.Ports
	if *ports != "" {
		var err error
		if p, err = parsePorts(*ports); err != nil {
			return err
		}
	}
	r, site, _, err := in.resolveJob(stderr, false)
	if err != nil {
		return err
	}
	// Where the settings came from, beside the document (stdout is the
	// collector's file alone).
	fmt.Fprintf(stderr, "gym-otel: checked: %s\n", in.checked(site))
	y, err := render.Preview(previewInput(r, jobfacts.Facts{JobID: *jobID, Node: *node, NodeIndex: *nodeIndex, GPUs: jobfacts.ParseGPUs(*gpus),
		GPUDevices: jobfacts.ParseGPUDevices(*devices)}, p, *output))
	if err != nil {
		return err
	}
	_, err = stdout.Write(y)
	return err
}

// renderPlaceholderHelp ends render's --help.
const renderPlaceholderHelp = `
The output is the collector.yaml each node of the job writes, except that
what only the node knows is a placeholder in angle brackets: the job id
(unless --job-id), the node (unless --node), SLURM_CLUSTER_NAME, the restart
count, SLURM_JOB_SLUID, the Lens UUIDs derived from them, and the 127.0.0.1
ports the node chooses at job start (unless --ports; the supervisor's own
<final-port> and <plugin-port> always). "# PREVIEW:" comment lines on top list the placeholders
the output holds and what each stands for. It is a preview: the collector
does not run it as it is.
`

// previewInput is what render shows for the job's settings r and the facts
// given on the command line: what the node alone knows (job id and node
// unless given, the cluster unless $SLURM_CLUSTER_NAME is set here, the
// restart count, the SLUID, the head node, ports left 0) becomes a placeholder; the user is
// the current user, as the submit's. out "" is the node's output dir.
func previewInput(r *config.Resolved, f jobfacts.Facts, p render.Ports, out string) render.Input {
	if f.JobID == "" {
		f.JobID = render.PlaceholderJobID
	}
	if f.Node == "" {
		f.Node = render.PlaceholderNode
	}
	if u, err := user.Current(); err == nil {
		f.User = u.Username
	}
	f.Cluster = os.Getenv("SLURM_CLUSTER_NAME")
	if f.Cluster == "" {
		f.Cluster = render.PlaceholderCluster
	}
	f.RestartCount, f.SLUID = render.PlaceholderRestartCount, render.PlaceholderSLUID
	f.HeadNode = render.PlaceholderHeadNode
	if out == "" {
		out = jobfacts.OutputDir(r, f)
	}
	return render.Input{Resolved: r, Job: render.JobOf(r, f), Ports: p, OutputDir: out}
}

func parsePorts(s string) (render.Ports, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return render.Ports{}, usageError{fmt.Sprintf("--ports %q: expected four ports GRPC,HTTP,HEALTH,TELEMETRY", s)}
	}
	var n [4]int
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 1 || v > 65535 {
			return render.Ports{}, usageError{fmt.Sprintf("--ports: %q is not a port", p)}
		}
		n[i] = v
	}
	return render.Ports{OTLPGRPC: n[0], OTLPHTTP: n[1], Health: n[2], Telemetry: n[3]}, nil
}

func runDirective(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("directive", "--config FILE [--plugstack FILE] [--site FILE] [--site-item KEY=VALUE...] [--run-id ID] [--benchmark NAME] [--model NAME] [--job-dir DIR] [OTEL_KEY=VALUE...]", stderr)
	cfg := fs.String("config", "", "the resolved submit config `FILE` as staged on the cluster (absolute path)")
	runID := fs.String("run-id", "", "the Gym run `ID` (run_id)")
	bench := fs.String("benchmark", "", "benchmark `NAME`")
	model := fs.String("model", "", "model `NAME` (default: the services' served model)")
	jobDir := fs.String("job-dir", "", "job `DIR` (default: the config's job.output_path); may hold %j, %A, %a")
	var sf siteFlags
	sf.register(fs)
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *cfg == "" {
		return usageError{"--config is required"}
	}
	if !strings.HasPrefix(*cfg, "/") {
		return usageError{fmt.Sprintf("--config %q: give the absolute path of the staged file on the cluster", *cfg)}
	}
	_, statErr := os.Stat(*cfg)
	staged := statErr == nil
	items := []config.Item{{Key: "config", Value: *cfg}}
	for _, it := range []config.Item{{Key: "run_id", Value: *runID}, {Key: "benchmark", Value: *bench}, {Key: "model", Value: *model}, {Key: "job_dir", Value: *jobDir}} {
		if it.Value != "" {
			items = append(items, it)
		}
	}
	for _, a := range rest {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return usageError{fmt.Sprintf("%q: expected OTEL_KEY=VALUE", a)}
		}
		items = append(items, config.Item{Key: k, Value: v})
	}
	spec := config.FormatSpec(items)
	if _, err := config.ParseSpec(spec); err != nil {
		return err
	}
	if strings.ContainsAny(spec, " \t\n\"'") {
		// #SBATCH lines are split on whitespace by sbatch.
		return fmt.Errorf("directive: a value holds whitespace or quotes, which an #SBATCH line cannot carry: %s", spec)
	}
	if err := checkDirective(sf, items, staged, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "#SBATCH --gym-otel=%s\n", spec)
	return nil
}

// checkDirective checks a directive's items (items[0] is config=) as the
// submit will: with the site's settings found as every command finds them
// (siteFlags.lookup) and the Gym config when it is staged here, the whole
// job's settings are resolved and validated (the token is not required);
// without site settings, the Gym config alone is checked. The checked:
// line goes to stderr (stdout holds the directive alone).
func checkDirective(sf siteFlags, items []config.Item, staged bool, stderr io.Writer) error {
	site, plugErr := sf.lookup()
	if site.Unread {
		return plugErr
	}
	spec := config.FormatSpec(items)
	checked := checkedLine(site, "", spec)
	if !staged {
		// Not staged here yet: the other layers are checked without it.
		spec = config.FormatSpec(items[1:])
		checked += " (" + items[0].Value + " is not on this host: not read)"
	}
	var err error
	if site.File != "" || len(site.Items) > 0 {
		_, _, err = resolveInputs(site, spec, stderr, false)
	} else if staged {
		_, err = config.LoadGymConfig(items[0].Value)
	}
	if err = errors.Join(plugErr, dropRepeats(err, plugErr)); err != nil {
		return withChecked(err, checked)
	}
	fmt.Fprintf(stderr, "gym-otel: checked: %s\n", checked)
	return nil
}
