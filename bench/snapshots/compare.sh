#!/bin/sh
# Named snapshots, resets and forks with two revisions of deskfarm side by
# side in one run: this tree's and REV's vmm, the same benchmark (this
# tree's bench/ built against each). Rounds alternate between the two, each
# a fresh process on the same state dir, and one table compares them.
#
#   bench/snapshots/compare.sh [-r rounds] REV [-- snapshots flags...]
set -eu
rounds=2
while getopts r: o; do
	case $o in
	r) rounds=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
rev=${1:?usage: compare.sh [-r rounds] REV [-- snapshots flags...]}
shift
[ "${1:-}" = "--" ] && shift
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
git worktree add --detach "$tmp/old" "$rev" >/dev/null 2>&1
rm -rf "$tmp/old/bench"
cp -r bench "$tmp/old/bench"
old=$(git rev-parse --short "$rev")
(cd "$tmp/old" && go build -o "$tmp/snapshots-old" ./bench/snapshots)
go build -o "$tmp/snapshots-new" ./bench/snapshots
raw=$tmp/samples.tsv
i=1
while [ "$i" -le "$rounds" ]; do
	echo "round $i of $rounds" >&2
	"$tmp/snapshots-old" -label "$old" -raw "$raw" "$@"
	"$tmp/snapshots-new" -label "this tree" -raw "$raw" "$@"
	i=$((i + 1))
done
"$tmp/snapshots-new" -table "$raw" "$@"
