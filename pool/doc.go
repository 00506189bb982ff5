// Package pool keeps pools of ready VMs and leases them to episodes.
//
// A pool is declared in a config file (see Config): an image, a VM size, how
// many VMs to keep warm (booted, at their ready snapshot) and how many the
// pool may hold at most. An episode leases one VM of a pool for a bounded
// time (its TTL); ending it (explicitly or at expiry) resets the VM to its
// ready snapshot and puts it back.
//
// Each pool VM is a member with an explicit state (booting, warm, leased,
// resetting, destroying, gone) that moves only through the transition table
// in lease.go; the Manager applies an input under its mutex and carries out
// the table's effects (vmm calls, the state file) after unlocking. Three
// loops feed it: the refill (boots, cleans and evicts to keep min_warm), the
// reaper (TTL) and the event loop (vmm's lifecycle events: a VM that died
// or was destroyed behind the pool's back leaves at once).
//
// Ownership lives in the VMs' labels (LabelPool at create, LabelEpisode
// while leased), so a restarted deskfarm reads it back from vmm; the state
// file in the farm's state dir keeps the episodes' records (see
// StateFileName). Admission is vmm's: a boot it refuses for lack of memory
// is ErrHostFull for a start, and a backoff (PoolStatus.LastError) for the
// refill.
//
// Episodes are reproducible: a pool VM no episode leases refuses changes
// (Owner, RequireLease, ErrNotLeased, checked by web), anything that may
// have changed a guest marks it dirty (Touch), and a dirty VM is reset
// before it is leased (Episode.CleanStart, ResetBeforeLeaseMS).
//
// For a cluster agent (cluster.Local), Desktops lists every VM's state,
// Changed announces each change of it, StartOn leases a named free VM to
// an episode id the caller chose, and SetPools replaces the config while
// the farm runs (setpools.go).
package pool
