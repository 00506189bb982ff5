#!/bin/sh
# Measures creates from saved state at two git revisions side by side in one
# run: builds bench/coldstart at OLD (default: the merge base with main) and
# at the work tree, then alternates ROUNDS rounds of N creates each, so both
# see the same host load, and prints one table.
#
#	bench/coldstart/compare.sh [-o OLD] [-r ROUNDS] [-n N] [-- bench flags]
set -eu
old=$(git merge-base HEAD main)
rounds=4
n=5
while getopts o:r:n: f; do
	case $f in
	o) old=$OPTARG ;;
	r) rounds=$OPTARG ;;
	n) n=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" 2>/dev/null || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/old" "$old"
# The old revision may predate bench/coldstart: measure it with this one.
rm -rf "$tmp/old/bench/coldstart" && cp -r bench/coldstart "$tmp/old/bench/coldstart"
(cd "$tmp/old" && go build -o "$tmp/bench-old" ./bench/coldstart)
go build -o "$tmp/bench-new" ./bench/coldstart
oldlabel="old ($(git rev-parse --short "$old"))"
newlabel="new ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- vmm || echo +))"
i=0
while [ $i -lt "$rounds" ]; do
	"$tmp/bench-old" -label "$oldlabel" -n "$n" -raw "$tmp/samples.tsv" "$@"
	"$tmp/bench-new" -label "$newlabel" -n "$n" -raw "$tmp/samples.tsv" "$@"
	i=$((i + 1))
done
"$tmp/bench-new" -table "$tmp/samples.tsv" "$@"
