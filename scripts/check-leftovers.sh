#!/usr/bin/env bash
# check-leftovers.sh fails if a test run left deskfarm domains, VM directories
# or sockets behind: a farm cleans up after itself.
set -euo pipefail
bad=0
# Domains of the test farm (its VM directories are under /var/lib/deskfarm-test).
doms=$(for d in $(virsh -c qemu:///system list --all --name | grep '^deskfarm-' || true); do
	if virsh -c qemu:///system dumpxml "$d" | grep -q '/var/lib/deskfarm-test/'; then echo "$d"; fi
done)
if [ -n "$doms" ]; then
	echo "leftover libvirt domains: $doms" >&2
	bad=1
fi
for d in /var/lib/deskfarm-test/vms /var/lib/deskfarm-bench/vms; do
	if [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then
		echo "leftover VM directories in $d: $(ls -A "$d")" >&2
		bad=1
	fi
done
[ $bad = 0 ] && echo "leftovers: none (no deskfarm domains, overlays or sockets)"
exit $bad
