#!/bin/sh
# Named snapshots, resets and forks with two revisions of deskfarm side by
# side in one run (bench/compare.sh).
#
#   bench/snapshots/compare.sh [-r rounds] REV [-- snapshots flags...]
rounds=2
while getopts r: o; do
	case $o in
	r) rounds=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
exec "$(dirname "$0")/../compare.sh" -r "$rounds" snapshots "$@"
