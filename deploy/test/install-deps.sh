#!/bin/sh
# install-deps.sh installs the servers that runnel's tests run against for
# real: the Mosquitto broker and its command-line clients (Debian packages,
# used by internal/testbroker), qemu-user-static (Debian; internal/qemu runs
# the arm64 and armv7 runnel-edge under qemu-aarch64-static and
# qemu-arm-static), the S3-compatible server versitygw
# (built from the Go module proxy, used by internal/tests3), and DuckDB for
# Node (install-duckdb.sh: the results archive's independent Parquet
# reader, used by internal/testduckdb). It is
# idempotent and fast when everything is present: it runs `apt-get update`
# once, and only when a package is missing, and `go install` only when the
# versitygw binary is missing (about 2-5 minutes cold, once per machine).
#
# versitygw lands where `go install` puts binaries: $(go env GOBIN), or
# $(go env GOPATH)/bin (usually ~/go/bin) when GOBIN is unset. The tests
# look there (and on $PATH, and at $RUNNEL_VERSITYGW) themselves, so PATH
# need not change.
#
# Run as root (CI does) for the Debian packages; otherwise it uses sudo if
# it can.
#
#   deploy/test/install-deps.sh           install what is missing
#   deploy/test/install-deps.sh --check   exit 1 and name what is missing
set -eu

VERSITYGW_VERSION=v1.8.0

# package:binary pairs; the binary proves the package is usable.
NEEDED="mosquitto:mosquitto mosquitto-clients:mosquitto_pub qemu-user-static:qemu-aarch64-static qemu-user-static:qemu-arm-static"

missing=""
for pair in $NEEDED; do
	pkg=${pair%%:*}
	bin=${pair#*:}
	if ! command -v "$bin" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$bin" ]; then
		case " $missing " in *" $pkg "*) ;; *) missing="$missing $pkg" ;; esac
	fi
done

HERE=$(dirname "$0")
sh "$HERE/install-duckdb.sh" ${1:-}

# Where go install puts versitygw, and whether it is there (or on PATH, or
# at $RUNNEL_VERSITYGW).
gobin=$(go env GOBIN)
if [ -z "$gobin" ]; then
	gobin="$(go env GOPATH | cut -d: -f1)/bin"
fi
versitygw=""
if [ -n "${RUNNEL_VERSITYGW:-}" ] && [ -x "$RUNNEL_VERSITYGW" ]; then
	versitygw=$RUNNEL_VERSITYGW
elif command -v versitygw >/dev/null 2>&1; then
	versitygw=$(command -v versitygw)
elif [ -x "$gobin/versitygw" ]; then
	versitygw="$gobin/versitygw"
fi

if [ -z "$missing" ] && [ -n "$versitygw" ]; then
	echo "install-deps: all present (mosquitto, mosquitto-clients, qemu-user-static, versitygw at $versitygw)"
	exit 0
fi

if [ "${1:-}" = "--check" ]; then
	[ -z "$versitygw" ] && missing="$missing versitygw"
	echo "install-deps: missing:$missing" >&2
	exit 1
fi

if [ -n "$missing" ]; then
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
	# Debian's package may start a system broker on :1883 where an init
	# system exists; the tests start their own brokers on free ports.
	echo "install-deps: mosquitto: $(mosquitto -h 2>/dev/null | head -n 1 || true)"
fi

if [ -z "$versitygw" ]; then
	echo "install-deps: building versitygw $VERSITYGW_VERSION into $gobin (a few minutes, once)"
	echo "+ go install github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
	go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
	if ! [ -x "$gobin/versitygw" ]; then
		echo "install-deps: go install succeeded but $gobin/versitygw is not there" >&2
		exit 1
	fi
	echo "install-deps: versitygw at $gobin/versitygw"
fi
echo "install-deps: done"
