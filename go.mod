module github.com/gym-otel-spank/gym-otel-spank

go 1.26

require (
	github.com/ebitengine/purego v0.11.3
	github.com/sirupsen/logrus v1.10.2
	go.opentelemetry.io/proto/otlp v1.11.0
	golang.org/x/sys v0.47.0
	google.golang.org/protobuf v1.36.12
	gopkg.in/yaml.v3 v3.0.1
)
