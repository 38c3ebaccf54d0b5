# runnel — the two commands a newcomer needs:
#   make run    the main job on its embedded default: the live demo (broker,
#               a fleet of simulated edges, a hub printing merged results)
#   make test   everything CI checks (gofmt, go vet, go mod tidy, tests with -race)
#   make release  the static release binaries for linux amd64, arm64 and armv7 in dist/

GO      ?= go
PKGS    ?= ./...
BIN     ?= bin

.PHONY: run demo replay test deps check build release bench fuzz proto clean

run: demo

demo:
	$(GO) run ./cmd/runnel-demo

# The engine alone: a recorded stream through one pipeline, results on stdout.
replay:
	$(GO) run ./cmd/runnel-edge replay --pipeline examples/line-temps.yaml --input examples/line-temps.jsonl

# RUNNEL_REQUIRE_SERVERS: a test whose real server (versitygw), reader
# (DuckDB) or emulator (qemu-user-static) is missing fails instead of skipping, so CI cannot go green by
# testing nothing.
test: deps check
	RUNNEL_REQUIRE_SERVERS=1 $(GO) test -race -shuffle=on -timeout 15m $(PKGS)

# Servers and readers the tests run against for real (Mosquitto, versitygw,
# DuckDB for Node, qemu-user-static for the ARM binaries); a no-op when present.
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

# Release binaries: static (CGO_ENABLED=0), -trimpath, symbol tables
# stripped (-s -w), with the version stamped into internal/buildinfo
# (--version, /healthz, the hub's /v1/health). One directory per platform,
# $(DIST)/linux-amd64, linux-arm64, linux-armv7 (GOARM=7), and
# $(DIST)/SHA256SUMS over all of them (check: cd dist && sha256sum -c SHA256SUMS).
DIST      ?= dist
PLATFORMS ?= linux/amd64 linux/arm64 linux/arm/7
RELEASE_CMDS := runnel-edge runnel-hub runnelctl
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILT     ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO := github.com/runnel-io/runnel/internal/buildinfo
LDFLAGS   := -s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).built=$(BUILT)
# grpcnotrace: grpc-go without golang.org/x/net/trace (and html/template),
# which nothing here turns on: ~0.6 MB less in each binary.
TAGS      := grpcnotrace
release:
	@rm -rf $(DIST)
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%%/*}; rest=$${p#*/}; arch=$${rest%%/*}; arm=""; dir=$$os-$$arch; \
	  case $$rest in */*) arm=$${rest#*/}; dir=$$os-$${arch}v$$arm;; esac; \
	  echo "release: $$dir ($(VERSION))"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOARM=$$arm $(GO) build -trimpath -tags '$(TAGS)' -ldflags '$(LDFLAGS)' \
	    -o $(DIST)/$$dir/ $(addprefix ./cmd/,$(RELEASE_CMDS)); \
	done
	cd $(DIST) && sha256sum */* > SHA256SUMS
	@echo "release: sizes (bytes)"; cd $(DIST) && for f in */*; do printf '  %-28s %10d\n' $$f $$(stat -c %s $$f); done
	@if [ -x $(DIST)/linux-amd64/runnel-edge ] && [ "$$(uname -m)" = x86_64 ]; then $(DIST)/linux-amd64/runnel-edge --version; fi

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
	rm -rf $(BIN) $(DIST)
