#!/bin/sh
# One benchmark at two revisions side by side in one run: BENCH (a directory
# of bench/ whose program takes -label, -raw and -table) built from this
# tree's bench/ against REV's code and against this tree's, rounds
# alternating between the two, each a fresh process, then one table.
# With -s DIR, each build gets a state dir of its own (DIR-old, DIR-new,
# passed as -state), so what each saves (a ready state) is its own.
#
#   bench/compare.sh [-r rounds] [-s statedir] BENCH REV [-- bench flags...]
set -eu
rounds=2
state=
while getopts r:s: o; do
	case $o in
	r) rounds=$OPTARG ;;
	s) state=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
bench=${1:?usage: compare.sh [-r rounds] [-s statedir] BENCH REV [-- bench flags...]}
rev=${2:?usage: compare.sh [-r rounds] [-s statedir] BENCH REV [-- bench flags...]}
shift 2
[ "${1:-}" = "--" ] && shift
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/old" "$rev" >/dev/null 2>&1
rm -rf "$tmp/old/bench"
cp -r bench "$tmp/old/bench"
old=$(git rev-parse --short "$rev")
(cd "$tmp/old" && go build -o "$tmp/bench-old" "./bench/$bench")
go build -o "$tmp/bench-new" "./bench/$bench"
raw=$tmp/samples.tsv
i=1
while [ "$i" -le "$rounds" ]; do
	echo "round $i of $rounds" >&2
	if [ -n "$state" ]; then
		"$tmp/bench-old" -state "$state-old" -label "$old" -raw "$raw" "$@"
		"$tmp/bench-new" -state "$state-new" -label "this tree" -raw "$raw" "$@"
	else
		"$tmp/bench-old" -label "$old" -raw "$raw" "$@"
		"$tmp/bench-new" -label "this tree" -raw "$raw" "$@"
	fi
	i=$((i + 1))
done
"$tmp/bench-new" -table "$raw" "$@"
