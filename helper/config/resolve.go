package config

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gym-otel-spank/gym-otel-spank/helper/gymschema"
	"path/filepath"
	"strings"
)

// EncodedVersion is the version of the encoded settings' JSON. A node
// refuses encoded settings of another version (the plugin on the submit host
// and on the node must be of one release).
const EncodedVersion = 2

// Resolved is a job's resolved settings: everything a node needs to run the
// job's collector, decided at submit. It travels to the job's nodes as the
// job-control variable GYM_OTEL_SPEC (compact JSON, base64url; see Encode).
// It never holds the backend token.
type Resolved struct {
	// Version is EncodedVersion.
	Version int `json:"v"`
	// Otel is the merged otel: block.
	Otel Otel `json:"otel"`
	// Identity is the run identity from the SPEC items and the Gym config.
	// Empty RunID means the job id; empty Cluster means SLURM_CLUSTER_NAME.
	Identity Identity `json:"identity"`
	// JobDir is the job directory: absolute, may hold %j, %A and %a.
	JobDir string `json:"job_dir"`
	// Services are the scrape endpoints of the Gym config's model
	// services, each with the nodes where it serves /metrics.
	Services []gymschema.Service `json:"services,omitempty"`
	// GymConfig is the path of the Gym submit config given with config=, if any.
	GymConfig string `json:"gym_config,omitempty"`
	// ChainedFrom is the Slurm job id of the running --gym-otel job that
	// submitted this one with a nested sbatch (a link of a chain, such as
	// Gym's auto-resume), "" otherwise. A link keeps its files apart: see
	// jobfacts.OutputDir.
	ChainedFrom string `json:"chained_from,omitempty"`

	// notices are printed at submit (Validate's warnings): user values of
	// keys the site pins.
	notices []string
	// noGymInstall: the Gym config has no driver.gym_install (checked at
	// submit only; the config file is not read on the nodes).
	noGymInstall bool
	// notes are the Gym config's one-line notes (keys ignored, services
	// not scraped); Validate returns them first among its warnings.
	notes []string
}

// Inputs are the sources a job's settings are resolved from. Layers, lowest
// first: Defaults(), SiteFile, SiteItems, the Gym config named by the SPEC's
// config= item, the SPEC's own otel items.
type Inputs struct {
	// SiteFile is the site file's path ("" for none).
	SiteFile string
	// SiteItems are the inline otel keys of plugstack.conf.
	SiteItems []Item
	// Spec is the value of --gym-otel ("" for a bare flag).
	Spec string
	// WorkDir resolves relative paths in the SPEC (config=, job_dir=) and
	// holds the default job dir; the submitting process's working directory.
	WorkDir string
}

// DefaultJobDirName is the job dir used, under the submit directory, when
// neither job_dir= nor the Gym config's job.output_path says one.
const DefaultJobDirName = "gym-otel-%j"

// Resolve merges the layers of in. Problems of every layer are returned
// together (joined). The result is not validated: call Validate.
func Resolve(in Inputs) (*Resolved, error) {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	spec, err := ParseSpec(in.Spec)
	add(err)
	o, pinned, err := SiteOtel(in.SiteFile, in.SiteItems)
	add(err)
	site := o
	var user []Layer // the layers a job's user writes, lowest first
	r := &Resolved{Version: EncodedVersion, Identity: spec.Identity}
	if spec.ConfigPath != "" {
		path := absUnder(in.WorkDir, spec.ConfigPath)
		r.GymConfig = path
		g, err := LoadGymConfig(path)
		add(err)
		if g != nil {
			o = g.Otel.Apply(o)
			user = append(user, g.Otel)
			r.Services = g.Services
			if r.Identity.Cluster == "" {
				r.Identity.Cluster = g.Cluster
			}
			if r.Identity.Model == "" {
				r.Identity.Model = g.PolicyModel
			}
			if r.Identity.Model == "" {
				r.Identity.Model = soleModel(g.Services)
			}
			r.notes = g.Notes
			if spec.JobDir == "" && g.OutputPath != "" {
				r.JobDir = absUnder(in.WorkDir, g.OutputPath)
			}
			r.noGymInstall = !g.GymInstall
		}
	}
	l, err := ParseInline("--gym-otel", spec.Otel)
	add(err)
	o = l.Apply(o)
	user = append(user, l)
	var changed []string
	before := o
	o, changed = pin(o, site, pinned)
	for _, k := range changed {
		where := "the job's settings"
		for _, ul := range user {
			if w := ul.where(k); w != "" {
				where = w
			}
		}
		r.notices = append(r.notices, fmt.Sprintf("otel.%s is pinned by the site to %s: the value %s (%s) is not used", k, fieldText(o, k), fieldText(before, k), where))
	}
	if spec.Off {
		o.Enabled = false
	}
	if spec.JobDir != "" {
		r.JobDir = absUnder(in.WorkDir, spec.JobDir)
	}
	if r.JobDir == "" {
		r.JobDir = filepath.Join(in.WorkDir, DefaultJobDirName)
	}
	r.Otel = o
	return r, errors.Join(errs...)
}

// soleModel returns the served model name when all services agree on one.
func soleModel(svcs []gymschema.Service) string {
	model := ""
	for _, s := range svcs {
		m := s.ServedModelName
		if m == "" {
			m = s.Model
		}
		if m == "" {
			continue
		}
		if model != "" && model != m {
			return ""
		}
		model = m
	}
	return model
}

func absUnder(dir, p string) string {
	if filepath.IsAbs(p) || dir == "" {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// Encode returns the settings as base64url (unpadded) of their compact JSON: the
// value of the job-control variable GYM_OTEL_SPEC.
func (r *Resolved) Encode() (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Decode parses a value made by Encode. It refuses another version and
// unknown fields. The result is not validated: call Validate.
func Decode(s string) (*Resolved, error) {
	if len(s) > MaxEncodedBytes {
		return nil, fmt.Errorf("GYM_OTEL_SPEC: %d bytes, more than the %d a submit ever forwards", len(s), MaxEncodedBytes)
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("GYM_OTEL_SPEC: not base64url: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var r Resolved
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("GYM_OTEL_SPEC: %w", err)
	}
	if r.Version != EncodedVersion {
		return nil, fmt.Errorf("GYM_OTEL_SPEC: version %d, this node understands %d: install one release of gym-otel-spank on submit hosts and nodes", r.Version, EncodedVersion)
	}
	return &r, nil
}
