#!/bin/sh
# install-deps.sh installs the Debian packages that runnel's tests run
# against for real (today: the Mosquitto broker and its command-line
# clients, used by internal/testbroker), then DuckDB for Node
# (install-duckdb.sh, the results archive's independent Parquet reader,
# used by internal/testduckdb). It is idempotent and fast when
# everything is present: it runs `apt-get update` once, and only when a
# package is missing. Run as root (CI does); otherwise it uses sudo if it can.
#
#   deploy/test/install-deps.sh           install what is missing
#   deploy/test/install-deps.sh --check   exit 1 and name what is missing
set -eu

# package:binary pairs; the binary proves the package is usable.
NEEDED="mosquitto:mosquitto mosquitto-clients:mosquitto_pub"

missing=""
for pair in $NEEDED; do
	pkg=${pair%%:*}
	bin=${pair#*:}
	if ! command -v "$bin" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$bin" ]; then
		missing="$missing $pkg"
	fi
done

HERE=$(dirname "$0")
sh "$HERE/install-duckdb.sh" ${1:-}

if [ -z "$missing" ]; then
	echo "install-deps: all present (mosquitto, mosquitto-clients)"
	exit 0
fi

if [ "${1:-}" = "--check" ]; then
	echo "install-deps: missing:$missing" >&2
	exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO="sudo"
	else
		echo "install-deps: need root (or sudo) to install:$missing" >&2
		exit 1
	fi
fi

echo "install-deps: installing:$missing"
echo "+ apt-get update"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
echo "+ apt-get install -y --no-install-recommends$missing"
# shellcheck disable=SC2086 # word splitting of $missing is intended
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing

# Debian's package may start a system broker on :1883 where an init system
# exists; the tests start their own brokers on free ports and do not need it.
echo "install-deps: done: $(mosquitto -h 2>/dev/null | head -n 1 || true)"
