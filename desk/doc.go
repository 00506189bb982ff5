// Package desk owns everything that lives as long as a VM's display: one
// per-VM session object, the Desk, holding
//
//   - the VNC connection (a vnc.Client mirroring the framebuffer; every
//     consumer of a VM's screen shares it),
//   - the frame hub that encodes the mirror once for every browser viewer,
//   - the action executors, one per screenshot size and at most
//     Options.MaxExecutors (default 4) of them: another size evicts the
//     least recently used, after releasing what it holds,
//   - the human-control state (the control token, what the person in
//     control holds down), and
//   - the activity log the live view overlays.
//
// A Pool holds the desks of a farm. It subscribes to the farm's lifecycle
// events (vmm.Farm.Subscribe) and is the only place desks end. Its one
// subscription only routes each event to its VM's lane, a queue applied
// in order by a goroutine of its own, so a VM whose event is slow to apply
// (a reset waiting for a run to stop) delays none of the other VMs' events:
//
//   - vmm.EventReset (a manual POST /v1/vms/{id}/reset and the end of an
//     episode alike): the runs begun before the reset are cancelled (they
//     end with a *ResetError; a run begun since goes on), the guest is back
//     at its snapshot, so once those runs have returned every key and
//     button agents or the person hold is released, control goes back to
//     the agent (a grant made after the reset stays), and the activity log starts a fresh segment (a "reset"
//     event from source "farm"; sequence numbers keep counting so a
//     following feed misses nothing).
//     Pool.WaitReset lets the caller of a reset answer only once this is
//     done.
//   - vmm.EventDied and vmm.EventDestroyed: the desk closes. Its runs are
//     cancelled with the reason, its VNC connection closes, its viewers end
//     with the reason, and the next Get of the VM fails (the VM is no
//     longer ready).
//
// A desk is dialled on first use (Pool.Get), not on EventReady: warm pool
// VMs nobody watches keep no connection and no mirror. Dialling happens
// outside any pool-wide lock: each VM has its own entry with its own dial in
// progress, a second caller for the same VM waits for that dial (bounded by
// its own context), and callers for other VMs never wait for it.
//
// Control is taken only through Desk.TakeControl (web decides who may call
// it). The takeover path (the RFB server noVNC talks to) reads the picture
// from Desk.Frames and sends input through Desk.Takeover: input passes only
// while its control token is current, and what the person holds is
// released when they disconnect, hand control back or are replaced. Agents
// act through Desk.Run, which is refused while a person holds control.
package desk
