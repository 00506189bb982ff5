#!/usr/bin/env bash
# check-leftovers.sh fails if a test run left deskfarm domains, VM directories
# or sockets behind: a farm cleans up after itself. It checks the state dirs
# of the tests (/var/lib/deskfarm-test), the fault tests
# (/var/lib/deskfarm-test-faults), the benchmarks (/var/lib/deskfarm-bench)
# and the soak (/var/lib/deskfarm-soak); never a user's /var/lib/deskfarm.
set -euo pipefail
dirs=(/var/lib/deskfarm-test /var/lib/deskfarm-test-faults /var/lib/deskfarm-bench /var/lib/deskfarm-soak)
bad=0
doms=$(for d in $(virsh -c qemu:///system list --all --name | grep '^deskfarm-' || true); do
	xml=$(virsh -c qemu:///system dumpxml "$d" 2>/dev/null || true)
	for s in "${dirs[@]}"; do
		if grep -q "$s/" <<<"$xml"; then echo "$d ($s)"; break; fi
	done
done)
if [ -n "$doms" ]; then
	echo "leftover libvirt domains: $doms" >&2
	bad=1
fi
for s in "${dirs[@]}"; do
	d=$s/vms
	if [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then
		echo "leftover VM directories in $d: $(ls -A "$d")" >&2
		bad=1
	fi
done
[ $bad = 0 ] && echo "leftovers: none (no deskfarm domains, overlays or sockets)"
exit $bad
