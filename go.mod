module github.com/gym-otel-spank/gym-otel-spank

go 1.26
