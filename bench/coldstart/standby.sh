#!/bin/sh
# Creates from saved state with and without vmm's standby VMs, side by side
# in one run: rounds alternate between the two, each a fresh process on the
# same state dir, and one table compares them.
#
#   bench/coldstart/standby.sh [-r rounds] [-n creates per round] [-g gap] [-- coldstart flags...]
set -eu
rounds=3 n=5 gap=3s
while getopts r:n:g: o; do
	case $o in
	r) rounds=$OPTARG ;;
	n) n=$OPTARG ;;
	g) gap=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/coldstart" ./bench/coldstart
raw=$bin/samples.tsv
i=1
while [ "$i" -le "$rounds" ]; do
	echo "round $i of $rounds" >&2
	"$bin/coldstart" -n "$n" -gap "$gap" -label "no standby" -raw "$raw" "$@"
	"$bin/coldstart" -n "$n" -gap "$gap" -standby -label "standby" -raw "$raw" "$@"
	i=$((i + 1))
done
"$bin/coldstart" -table "$raw" "$@"
