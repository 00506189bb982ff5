// Package pool keeps pools of ready VMs and leases them to episodes.
//
// A pool is declared in a config file (see Config): an image, a VM size, how
// many VMs to keep warm (booted, at their ready snapshot) and how many the
// pool may hold at most. An episode leases one VM of a pool for a bounded
// time (its TTL); ending it (explicitly or at expiry) resets the VM to its
// ready snapshot and puts it back. A VM that fails its reset, or whose QEMU
// dies, is destroyed and replaced.
//
// Pool membership and leases are persisted in one JSON file in the farm's
// state dir (see stateFile), written atomically, so a restarted deskfarm
// re-attaches the VMs vmm adopts to their pools and episodes.
package pool
