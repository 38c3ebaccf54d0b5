# runnel — the two commands a newcomer needs:
#   make run    the main job on its embedded default: the live demo (broker,
#               a fleet of simulated edges, a hub printing merged results)
#   make test   everything CI checks (gofmt, go vet, go mod tidy, tests with -race)

GO      ?= go
PKGS    ?= ./...
BIN     ?= bin

.PHONY: run demo replay test deps check build bench fuzz proto clean

run: demo

demo:
	$(GO) run ./cmd/runnel-demo

# The engine alone: a recorded stream through one pipeline, results on stdout.
replay:
	$(GO) run ./cmd/runnel-edge replay --pipeline examples/line-temps.yaml --input examples/line-temps.jsonl

# RUNNEL_REQUIRE_SERVERS: a test whose real server (versitygw) is missing
# fails instead of skipping, so CI cannot go green by testing nothing.
test: deps check
	RUNNEL_REQUIRE_SERVERS=1 $(GO) test -race -shuffle=on -timeout 15m $(PKGS)

# Servers the tests run against for real (Mosquitto, versitygw); a no-op
# when present.
deps:
	sh deploy/test/install-deps.sh

check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@cp go.mod /tmp/runnel.go.mod.bak; cp go.sum /tmp/runnel.go.sum.bak; \
	 $(GO) mod tidy; \
	 if ! git diff --quiet -- go.mod go.sum; then echo "go mod tidy changes go.mod/go.sum:"; git --no-pager diff -- go.mod go.sum; \
	   cp /tmp/runnel.go.mod.bak go.mod; cp /tmp/runnel.go.sum.bak go.sum; exit 1; fi

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/ ./cmd/...

# Benchmarks quoted in the README (BENCH=regexp to pick, COUNT for benchstat).
BENCH ?= .
COUNT ?= 1
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) $(PKGS)

# A short coverage-guided run of every fuzz target (FUZZTIME each).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; done

# Regenerates proto/runnelv1 (Go, gRPC, gateway, OpenAPI) with pinned plugins.
proto:
	bash proto/gen.sh

clean:
	rm -rf $(BIN)
