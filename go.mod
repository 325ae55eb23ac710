module github.com/gym-otel-spank/gym-otel-spank

go 1.26

require (
	github.com/ebitengine/purego v0.11.3
	github.com/sirupsen/logrus v1.10.2
	golang.org/x/sys v0.13.0
	gopkg.in/yaml.v3 v3.0.1
)

require github.com/goccy/go-json v0.10.5 // indirect
