module github.com/runnel-io/runnel

go 1.26.0

require (
	github.com/DataDog/sketches-go v1.4.8 // indirect
	github.com/axiomhq/hyperloglog v0.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-metro v0.0.0-20250106013310-edb8663e5e33 // indirect
	github.com/expr-lang/expr v1.17.8 // indirect
	github.com/kamstrup/intmap v0.5.2 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.25.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
