#!/bin/sh
# install-duckdb.sh installs DuckDB for Node (npm @duckdb/node-api, a
# prebuilt binary inside the package), the independent reader the results
# archive's tests read the Parquet files back with. It goes into a
# project-owned cache directory, by default ~/.cache/runnel/duckdb
# (RUNNEL_DUCKDB_DIR overrides it); the tests look there too. Idempotent:
# a no-op when that version is present.
#
#   deploy/test/install-duckdb.sh           install when missing
#   deploy/test/install-duckdb.sh --check   exit 1 when missing
set -eu

VERSION=1.5.6-r.1
DIR=${RUNNEL_DUCKDB_DIR:-${HOME:-/root}/.cache/runnel/duckdb}
PKG="$DIR/node_modules/@duckdb/node-api/package.json"

if [ -f "$PKG" ] && grep -q "\"version\": \"$VERSION\"" "$PKG"; then
	echo "install-duckdb: present ($DIR, @duckdb/node-api $VERSION)"
	exit 0
fi
if [ "${1:-}" = "--check" ]; then
	echo "install-duckdb: missing: @duckdb/node-api $VERSION in $DIR" >&2
	exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "install-duckdb: npm is missing (apt-get install -y nodejs npm)" >&2
	exit 1
fi
mkdir -p "$DIR"
echo "+ npm install --prefix $DIR @duckdb/node-api@$VERSION"
npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "@duckdb/node-api@$VERSION"
echo "install-duckdb: done ($DIR)"
