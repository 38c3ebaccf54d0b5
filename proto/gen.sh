#!/usr/bin/env bash
# Regenerates proto/runnelv1 and the OpenAPI document from proto/runnel/v1.
# Installs protoc (Debian protobuf-compiler) and the pinned plugins when
# missing. Run from anywhere: `make proto`.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2
GRPC_GATEWAY=v2.33.0

bin="$PWD/.cache/protobin"
mkdir -p "$bin"
if ! command -v protoc >/dev/null; then
	apt-get update -qq && apt-get install -y -qq protobuf-compiler
fi
want() { [ -x "$bin/$1" ] && [ "$(cat "$bin/$1.version" 2>/dev/null)" = "$2" ]; }
install() { # name module version
	want "$1" "$3" && return
	GOBIN="$bin" go install "$2@$3"
	echo "$3" >"$bin/$1.version"
}
install protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO"
install protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC"
install protoc-gen-grpc-gateway github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway "$GRPC_GATEWAY"
install protoc-gen-openapiv2 github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2 "$GRPC_GATEWAY"

out=$(mktemp -d)
mkdir -p "$out/gw"
trap 'rm -rf "$out"' EXIT
PATH="$bin:$PATH" protoc -I proto -I third_party -I /usr/include \
	--go_out="$out" --go_opt=paths=source_relative \
	--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	--grpc-gateway_out="$out/gw" --grpc-gateway_opt=paths=source_relative,standalone=true \
	--openapiv2_out="$out" --openapiv2_opt=allow_merge=true,merge_file_name=runnel \
	proto/runnel/v1/*.proto
# The REST gateway is a package of its own (standalone), so that what links
# the messages and services (runnel-edge) does not link grpc-gateway.
rm -f proto/runnelv1/*.pb.go proto/runnelv1/*.pb.gw.go proto/runnelv1gw/*.pb.gw.go
mkdir -p proto/runnelv1 proto/runnelv1gw
cp "$out"/runnel/v1/*.go proto/runnelv1/
cp "$out"/gw/runnel/v1/*.pb.gw.go proto/runnelv1gw/
cp "$out"/runnel.swagger.json proto/runnelv1gw/openapi.json
sed -i 's|^package runnelv1$|package runnelv1gw|' proto/runnelv1gw/*.pb.gw.go
gofmt -l proto/runnelv1 proto/runnelv1gw >/dev/null
echo "proto: generated $(ls proto/runnelv1 proto/runnelv1gw | wc -l) files"
