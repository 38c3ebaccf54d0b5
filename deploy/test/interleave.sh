#!/usr/bin/env bash
# Runs a benchmark alternately at an older commit and at the working tree,
# so that both see the same moments of a noisy shared machine: single runs
# of the window operator here swing by ±30% with the other tenants.
#
#   deploy/test/interleave.sh REV [ROUNDS [PKG [BENCH [BENCHTIME]]]]
#
# prints "old N ns/op" and "new N ns/op" lines, alternating. The defaults
# are the README's window figure: 12 rounds of
# ./window 'Operator/window=tumbling-1m/keys=1e\+05' at 8000000x.
set -euo pipefail
rev=$1
rounds=${2:-12}
pkg=${3:-./window}
bench=${4:-'Operator/window=tumbling-1m/keys=1e\+05'}
benchtime=${5:-8000000x}

tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/wt" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/wt" "$rev"
(cd "$tmp/wt" && go test -c -o "$tmp/old.test" "$pkg")
go test -c -o "$tmp/new.test" "$pkg"
dir=$(go list -f '{{.Dir}}' "$pkg")
for _ in $(seq "$rounds"); do
	for b in old new; do
		v=$(cd "$dir" && "$tmp/$b.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime" |
			awk '/ns\/op/ { print $3; exit }')
		echo "$b $v ns/op"
	done
done
