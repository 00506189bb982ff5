// Package vmm owns deskfarm's virtual machines: qcow2 overlays on read-only
// base images, libvirt domains, the QEMU guest agent, the session readiness
// channel, the ready snapshot that resets return to, guest memory admission,
// and the lifecycle events (created, ready, reset, died, destroyed) every
// other package learns of VM changes from.
//
// It talks to libvirtd through go-libvirt over the local unix socket; nothing
// here shells out to virsh.
//
// Files, by concern:
//   - api.go, events.go, bus.go, errors.go: the contract (Farm, VM, Event,
//     sentinels).
//   - manager.go: Config, Manager, List and Get; machine.go: one VM's
//     record and its locking (an immutable spec read without locks, the
//     state that changes under one mutex, and an op lock that orders
//     lifecycle changes against guest calls).
//   - options.go: CreateOptions, normalised once (Normalize) by every
//     caller, web included; network.go: network modes, forwards and the
//     host ports they take; admission.go: the host's limits (CPUs,
//     Config.MemoryLimitMiB, overcommitted by Config.MemoryOvercommit with
//     a floor on the host's MemAvailable, Capacity) and registering a new
//     VM.
//   - create.go: Create as named steps (overlay, define, start, restore +
//     clock | wait-display + wait-agent + snapshot, mark-ready) run by
//     steps.go's runSteps with reverse undo; qemuimg.go: the overlay on the
//     base; savedstate.go: saved ready states later VMs start from, and
//     their names; spare.go: a copy of each made ahead, which a create
//     renames into place; standby.go: a VM made ahead per saved ready
//     state (Config.Standby), paused after its loadvm, which the next
//     create claims (continue, clock, mark-ready); files.go: the state
//     dir's layout and file modes.
//   - snapshots.go: named snapshots (savevm, info snapshots, loadvm through
//     Reset's own path, delvm), their names and limits; fork.go: Fork, new
//     VMs from a VM's current state through a fork template (a copy of its
//     overlay holding a transfer snapshot), their QEMUs started on
//     placeholder disks (or taken from the standby) while the template is
//     made; pivot.go: moving a paused QEMU's disk onto another qcow2 (QMP
//     blockdev-add, a sync-none mirror, job-complete, blockdev-del).
//   - guestcalls.go: Reset and the calls into the guest; alive.go: naming a
//     dead QEMU when a call fails; teardown.go: Destroy and removing what
//     is left of a VM.
//   - libvirt.go: the hypervisor interface and its go-libvirt
//     implementation. Every call takes a context; one goroutine owns the
//     connection and redials libvirtd with backoff, callers wait for it on
//     their context; only idempotent calls are re-sent after a reconnect.
//   - watch.go, pidwatch.go: deaths. libvirt's lifecycle events (and, as a
//     fallback for speed, a pidfd on each QEMU) turn a crashed, killed,
//     powered-off or outside-destroyed VM into StateBroken and EventDied
//     at once; after a reconnect every VM's state is read again.
//   - recover.go: a restarted deskfarm adopts its ready VMs (labels
//     included) and removes half-made ones and orphan directories.
//   - agent.go, agentproto.go: the guest agent; monitor.go: QEMU's human
//     monitor (savevm/loadvm/delvm, info snapshots; QMP for pivot.go);
//     session.go: deskfarm's
//     own guest channel.
//   - domainxml.go: the domain definition (with the virtio balloon's free
//     page reporting) and deskfarm's metadata in it; security.go: the
//     host's sVirt model.
//
// Security: VM directories, overlays and saved ready states are readable by
// the QEMU user (or root) alone; guests have no network unless created with
// NetworkUser; where the host has AppArmor or SELinux each QEMU gets a
// dynamic sVirt label (the log says which at start).
//
// Tests: unit tests run Manager on fakeHV (fakehv_test.go), the one fake
// hypervisor; parsers are tested on real replies in testdata/captures.json
// (provenance inside); tests named E2E need root, libvirtd and built images
// (internal/testenv).
package vmm
