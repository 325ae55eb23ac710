package plugin

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gym-otel-spank/gym-otel-spank/helper/config"
	"github.com/gym-otel-spank/gym-otel-spank/helper/jobfacts"
	"github.com/gym-otel-spank/gym-otel-spank/helper/lifecycle"
	"github.com/gym-otel-spank/gym-otel-spank/helper/render"
)

func TestParseArgs(t *testing.T) {
	a, err := ParseArgs([]string{"site=/etc/slurm/gym-otel.yaml", "default=on", "prolog_timeout=30",
		"cli=/opt/bin/gym-otel-spank", "record_dir=/run/x", "cgroup=required", "on_failure=fail", "scrape_interval_seconds=5"})
	if err != nil {
		t.Fatal(err)
	}
	want := Args{Site: "/etc/slurm/gym-otel.yaml", DefaultOn: true, PrologTimeout: 30, CLI: "/opt/bin/gym-otel-spank",
		RecordDir: "/run/x", Cgroup: CgroupRequired, SiteItems: []config.Item{{Key: "on_failure", Value: "fail"}, {Key: "scrape_interval_seconds", Value: "5"}}}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("got %+v\nwant %+v", a, want)
	}
	for _, c := range []struct{ arg, want string }{
		{"bogus", `"bogus": expected key=value`},
		{"Site=/x", `"Site=/x": expected key=value`},
		{"site=rel/x", "absolute path"},
		{"default=maybe", "default wants on or off"},
		{"cgroup=yes", "cgroup wants auto, required or off"},
		{"prolog_timeout=0", "prolog_timeout wants"},
		{"scrape_intervall=3", `"scrape_intervall=3": unknown argument`},
		{"prolog_timout=30", `"prolog_timout=30": unknown argument (did you mean "prolog_timeout"?)`},
		{"recorddir=/x", `(did you mean "record_dir"?)`},
		{"zzzzzzzzzzzz=1", "unknown argument (plugin arguments: site, default, prolog_timeout"},
		{"on_failure=explode", "otel.on_failure=explode"},
	} {
		_, err := ParseArgs([]string{c.arg})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.arg, err, c.want)
		}
	}
}

func TestExpandHostlist(t *testing.T) {
	for in, want := range map[string][]string{
		"gn1":                     {"gn1"},
		"gn[1-3]":                 {"gn1", "gn2", "gn3"},
		"gn[1-2],login01":         {"gn1", "gn2", "login01"},
		"n[08-10,3]":              {"n08", "n09", "n10", "n3"},
		"rack[1-2]-n[01-02]":      {"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"},
		"a[1],b[2-3]x,c":          {"a1", "b2x", "b3x", "c"},
		"node-[001-002],node-010": {"node-001", "node-002", "node-010"},
	} {
		got, err := ExpandHostlist(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"gn[1-", "gn[2-1]", "gn]", "gn[a-b]"} {
		if _, err := ExpandHostlist(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if i, _ := NodeIndex("gn[1-2]", "gn2"); i != 1 {
		t.Errorf("NodeIndex gn2 = %d", i)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := &Record{Status: "failed", OnFailure: "fail", Reason: "line one\nline two", FinalWait: 16, DrainTimeout: 20,
		SupervisorPID: 42, SupervisorStart: 123456, UID: 2001,
		Env: []KV{{"A", "1"}, {"OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20x"}}, Unset: []string{"OTEL_TOKEN"}}
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	r.Reason = "line one line two"
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("got %+v\nwant %+v", got, r)
	}
	if _, err := (&Record{Status: "ready", Env: []KV{{"A", "x\ny"}}}).Marshal(); err == nil {
		t.Error("a newline in an env value was accepted")
	}
}

func TestRecordDirRefusesSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (the record dir is root's)")
	}
	base := t.TempDir()
	other := t.TempDir()
	if err := os.Symlink(other, filepath.Join(base, "gn1")); err != nil {
		t.Fatal(err)
	}
	if _, err := MakeJobRecordDir(base, "gn1", 7); err == nil {
		t.Fatal("a symlinked node dir was accepted")
	}
	dir, err := MakeJobRecordDir(base, "gn2", 7)
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{Status: "ready", OnFailure: "continue", UID: 1}
	if err := WriteRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(dir, RecordFile))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v", fi.Mode().Perm())
	}
	if _, err := ReadRecord(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := MakeJobRecordDir(base, "../x", 7); err == nil {
		t.Error("a node name with a slash was accepted")
	}
}

func TestTaskEnv(t *testing.T) {
	spec := &config.Resolved{Otel: config.Defaults(), JobDir: "/j"}
	spec.Identity.RunID = "run-%j"
	rep := lifecycle.Report{Status: "ready", Ports: render.Ports{OTLPGRPC: 4001, OTLPHTTP: 4002}, ReceiverToken: "abc"}
	env := TaskEnv(spec, jobfacts.Facts{JobID: "12"}, rep)
	m := map[string]string{}
	for _, kv := range env {
		m[kv.Key] = kv.Value
	}
	want := map[string]string{
		"NEMO_GYM_OTEL_ENABLED": "1", "NEMO_GYM_OTEL_RUN_ID": "run-12", "NEMO_GYM_OTEL_SPAN_GROUPS": "default,verify",
		"NEMO_GYM_OTEL_LOGS_ENABLED": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4002",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc",
		"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:4001", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "grpc",
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %v\nwant %v", m, want)
	}
	spec.Otel.GymTelemetry, spec.Otel.GymLogs = false, false
	m = map[string]string{}
	for _, kv := range TaskEnv(spec, jobfacts.Facts{JobID: "12"}, rep) {
		m[kv.Key] = kv.Value
	}
	if _, ok := m["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"]; ok || m["NEMO_GYM_OTEL_LOGS_ENABLED"] != "0" || m["NEMO_GYM_OTEL_ENABLED"] != "0" {
		t.Fatalf("gym_telemetry/gym_logs off: %v", m)
	}
	if FinalWait(config.Otel{ScrapeIntervalSeconds: 15}) != 16 || FinalWait(config.Otel{ScrapeIntervalSeconds: 300}) != 30 {
		t.Error("FinalWait")
	}
}

func TestSubmit(t *testing.T) {
	dir := t.TempDir()
	site := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(site, []byte("otel:\n  endpoint: https://otlp.example.com\n  service_name: s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) config.LookupEnv {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	a := Args{Site: site}
	res, err := Submit(a, "", dir, env(map[string]string{"OTEL_TOKEN": "t"}))
	if err != nil || res.Spec == "" || res.TokenEnv != "OTEL_TOKEN" {
		t.Fatalf("%+v %v", res, err)
	}
	r, err := config.Decode(res.Spec)
	if err != nil || r.JobDir != filepath.Join(dir, config.DefaultJobDirName) {
		t.Fatalf("decoded %+v %v", r, err)
	}
	if _, err := Submit(a, "", dir, env(nil)); err == nil || !strings.Contains(err.Error(), "otel.token_env") {
		t.Fatalf("no token: %v", err)
	}
	if res, err := Submit(a, "off", dir, env(nil)); err != nil || !res.Off {
		t.Fatalf("off: %+v %v", res, err)
	}
}

func TestUserText(t *testing.T) {
	if got := UserText("a\nb\x1b[31mred\r\x00 \xff end", 100); got != "a b [31mred ? end" {
		t.Fatalf("%q", got)
	}
	long := strings.Repeat("é", 1000) // 2000 bytes
	got := UserText(long, 100)
	if len(got) > 100 || !strings.HasSuffix(got, "bytes cut)") || !utf8.ValidString(got) {
		t.Fatalf("%d %q", len(got), got)
	}
}
