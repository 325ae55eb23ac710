package config

import (
	"strings"
	"testing"
)

// otel.delivery and otel.delivery_rate_cap: parsed, defaulted, refused out
// of range or of their values with the key named; delivery files (the
// default) with token_resource_attribute accepted (the supervisor's
// sender adds the token); "" from an older submit reads as files.
func TestDeliveryKeys(t *testing.T) {
	r, err := Resolve(Inputs{Spec: "endpoint=https://x.example.com,service_name=s", WorkDir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Otel.Delivery != DeliveryFiles || r.Otel.RateCap() != DefaultDeliveryRateCap || !r.Otel.FileDelivery() {
		t.Errorf("defaults: delivery %q rate cap %d", r.Otel.Delivery, r.Otel.RateCap())
	}
	r, err = Resolve(Inputs{Spec: "endpoint=https://x.example.com,service_name=s,delivery=collector", WorkDir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Validate(nil); err != nil || r.Otel.FileDelivery() {
		t.Errorf("collector: %v %+v", err, r.Otel)
	}
	r.Otel.Delivery = ""
	if !r.Otel.FileDelivery() {
		t.Error(`delivery "" (an older submit's settings) does not read as files`)
	}
	r, err = Resolve(Inputs{Spec: "endpoint=https://x.example.com,service_name=s,delivery=files,delivery_rate_cap=5000", WorkDir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Validate(nil); err != nil || !r.Otel.FileDelivery() || r.Otel.RateCap() != 5000 {
		t.Errorf("files, 5000: %v %+v", err, r.Otel)
	}
	for spec, want := range map[string]string{
		"delivery=file":                  "otel.delivery",
		"delivery_rate_cap=10":           "otel.delivery_rate_cap",
		"delivery_rate_cap=fast":         "otel.delivery_rate_cap",
		"delivery_rate_cap=100000000000": "otel.delivery_rate_cap",
	} {
		_, err := Resolve(Inputs{Spec: "endpoint=https://x.example.com,service_name=s," + spec, WorkDir: "/tmp"})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one naming %s", spec, err, want)
		}
	}
	r, err = Resolve(Inputs{Spec: "endpoint=https://x.example.com,service_name=s,delivery=files,token_resource_attribute=true", WorkDir: "/tmp"})
	if err == nil {
		_, err = r.Validate(nil)
	}
	if err != nil {
		t.Errorf("files with token_resource_attribute: %v", err)
	}
	// Forwarded settings: a forged value fails on the node, naming the key.
	r, _ = Resolve(Inputs{Spec: "endpoint=https://x.example.com,service_name=s", WorkDir: "/tmp"})
	r.Otel.Delivery, r.Otel.DeliveryRateCap = "backend", 7
	_, err = r.Validate(nil)
	if err == nil || !strings.Contains(err.Error(), `otel.delivery: "backend"`) || !strings.Contains(err.Error(), "otel.delivery_rate_cap: 7 is out of range") {
		t.Errorf("forged: %v", err)
	}
}

// otel.delivery none (remote export off): no endpoint and no token are
// needed, a submitting shell without the token passes, the endpoint a
// site sets is dropped with a warning that says so; without none, a
// missing endpoint is still refused naming the key and the way out.
func TestDeliveryNone(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	r, err := Resolve(Inputs{Spec: "service_name=s,delivery=none", WorkDir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	warnings, err := r.Validate(noEnv)
	if err != nil || r.Otel.RemoteExport() || r.Otel.CollectorDelivery() || r.Otel.FileDelivery() {
		t.Fatalf("none, no endpoint, no token: %v %+v", err, r.Otel)
	}
	if !strings.Contains(strings.Join(warnings, "\n"), "remote export is off") {
		t.Errorf("warnings %q: want one saying remote export is off", warnings)
	}
	r, err = Resolve(Inputs{Spec: "endpoint=https://x.example.com,service_name=s,delivery=none,token_resource_attribute=true", WorkDir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	warnings, err = r.Validate(noEnv)
	if err != nil || r.Otel.Endpoint != "" || !strings.Contains(strings.Join(warnings, "\n"), "otel.endpoint https://x.example.com is not used") {
		t.Errorf("none with a site endpoint: %v endpoint %q warnings %q", err, r.Otel.Endpoint, warnings)
	}
	r, err = Resolve(Inputs{Spec: "service_name=s", WorkDir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = r.Validate(noEnv); err == nil || !strings.Contains(err.Error(), "otel.endpoint: not set") || !strings.Contains(err.Error(), "otel.delivery: none") {
		t.Errorf("no endpoint, delivery collector: %v", err)
	}
}
