package pool

import (
	"fmt"
	"strings"
)

// This file is the lease state machine: what a pool member (one VM of a
// pool) may go through, as a table of state × input → state + effects. It
// is pure: no locks, no I/O, no clock. The Manager holds its mutex while it
// applies an input (step), then carries out the effects the table names
// after unlocking (runEffects in effects.go, the only code that does), and
// feeds the outcome back as the next input. Anything the table does not list is refused,
// which is how "a dead warm VM is never leased" and "a dirty VM is never
// leased" are enforced rather than hoped for.
//
// The usual life: booting -booted-> warm -lease-> leased -end-> resetting
// -reset_ok-> warm. A failed boot is gone; a failed reset, a death or an
// eviction goes through destroying to gone, and the refill replaces it.
//
// "destroyed" from any live state means the domain went away (our own
// Destroy, or one behind the pool's back); "died" means QEMU died or the
// guest powered off. A member is dirty when something may have changed its
// guest since its last reset began (Touch); a dirty warm member must be
// reset (clean) before it can be leased.

// memberState is where a pool VM is in its life.
type memberState uint8

const (
	stBooting    memberState = iota // Create in flight; the VM id is not known yet
	stWarm                          // ready and unleased (leasable once clean)
	stLeased                        // an episode's
	stResetting                     // being returned to its ready snapshot
	stDestroying                    // being destroyed; will be replaced
	stGone                          // no longer a member; the record is dropped
	numStates
)

var stateNames = [...]string{"booting", "warm", "leased", "resetting", "destroying", "gone"}

func (s memberState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", s)
}

// input is something that happens to a member.
type input uint8

const (
	inBooted      input = iota // Create returned a ready VM
	inBootFailed               // Create failed or was given up
	inLease                    // an episode takes the VM
	inAbort                    // a lease could not be recorded; the VM was never handed out
	inEnd                      // the episode ends (deleted, expired): reset the VM
	inClean                    // reset a dirty warm VM so it can be leased
	inResetOK                  // the reset succeeded
	inResetFailed              // the reset failed; the VM is unusable
	inEvict                    // the VM no longer fits its pool (config changed, over max)
	inDied                     // vmm: QEMU died or the guest powered off
	inDestroyed                // the domain is gone (our Destroy, or behind our back)
	inTouch                    // a call may have changed the guest (action, exec, file write, takeover)
	numInputs
)

var inputNames = [...]string{"booted", "boot_failed", "lease", "abort", "end", "clean", "reset_ok",
	"reset_failed", "evict", "died", "destroyed", "touch"}

func (in input) String() string {
	if int(in) < len(inputNames) {
		return inputNames[in]
	}
	return fmt.Sprintf("input(%d)", in)
}

// effects are what the Manager must do after a transition, outside its lock,
// in the order effectOrder (effects.go) fixes whichever of them a
// transition names.
type effects uint16

const (
	fxWake        effects = 1 << iota // re-evaluate waiting starts and the refill
	fxLabel                           // set the episode label on the VM
	fxUnlabel                         // remove the episode label from the VM
	fxCancelCalls                     // cancel the episode's calls in flight
	fxReset                           // reset the VM to its ready snapshot
	fxDestroy                         // destroy the VM
	fxEndEpisode                      // record the episode as ended
	fxPersist                         // write the state file (episode records changed)
	numEffects    = iota
)

var effectNames = [...]string{"wake", "label", "unlabel", "cancel_calls", "reset", "destroy", "end_episode", "persist"}

func (fx effects) has(e effects) bool { return fx&e != 0 }

func (fx effects) String() string {
	var names []string
	for i := 0; i < numEffects; i++ {
		if fx&(1<<i) != 0 {
			names = append(names, effectNames[i])
		}
	}
	return strings.Join(names, "+")
}

// dirtyOp is what a transition does to the member's dirty mark.
type dirtyOp uint8

const (
	dirtyKeep  dirtyOp = iota
	dirtySet           // something may have touched the guest
	dirtyClear         // a reset begins: what came before it is undone
)

// transition is one row of the table.
type transition struct {
	to    memberState
	fx    effects
	dirty dirtyOp
	// cleanOnly refuses the input when the member is dirty.
	cleanOnly bool
}

type stateInput struct {
	s  memberState
	in input
}

// transitions is the whole state machine. A (state, input) pair that is not
// here is refused.
var transitions = map[stateInput]transition{
	{stBooting, inBooted}:     {to: stWarm, fx: fxWake},
	{stBooting, inBootFailed}: {to: stGone, fx: fxWake},
	{stBooting, inTouch}:      {to: stBooting, dirty: dirtySet},

	// A warm VM is leased only when clean. The episode label is its
	// ownership record; the state file gets the episode (ttl, start).
	{stWarm, inLease}:     {to: stLeased, fx: fxLabel | fxPersist, cleanOnly: true},
	{stWarm, inClean}:     {to: stResetting, fx: fxUnlabel | fxReset, dirty: dirtyClear},
	{stWarm, inEvict}:     {to: stDestroying, fx: fxDestroy},
	{stWarm, inDied}:      {to: stDestroying, fx: fxDestroy | fxWake},
	{stWarm, inDestroyed}: {to: stGone, fx: fxWake},
	{stWarm, inTouch}:     {to: stWarm, fx: fxWake, dirty: dirtySet}, // wake: the refill cleans it

	// Leaving leased goes through resetting, so that the episode label is
	// removed while no one else can lease the VM (an unlabel racing a new
	// lease's label would erase the new owner). An aborted lease was never
	// handed out, but the label may be set: same path.
	{stLeased, inAbort}: {to: stResetting, fx: fxUnlabel | fxReset | fxWake, dirty: dirtyClear},
	// Ending resets whether or not the VM is dirty: the agent may have
	// changed the guest through calls the pool does not see (the viewer).
	{stLeased, inEnd}:       {to: stResetting, fx: fxCancelCalls | fxUnlabel | fxReset | fxPersist, dirty: dirtyClear},
	{stLeased, inDied}:      {to: stDestroying, fx: fxCancelCalls | fxEndEpisode | fxDestroy | fxPersist | fxWake},
	{stLeased, inDestroyed}: {to: stGone, fx: fxCancelCalls | fxEndEpisode | fxPersist | fxWake},
	{stLeased, inTouch}:     {to: stLeased, dirty: dirtySet},

	// A touch during a reset may have landed after the snapshot was
	// loaded: the member stays dirty and is reset again before a lease.
	{stResetting, inResetOK}:     {to: stWarm, fx: fxWake},
	{stResetting, inResetFailed}: {to: stDestroying, fx: fxDestroy},
	// The reset in flight fails on a dead VM; that failure moves it on.
	{stResetting, inDied}:      {to: stResetting},
	{stResetting, inDestroyed}: {to: stGone, fx: fxWake},
	{stResetting, inTouch}:     {to: stResetting, dirty: dirtySet},

	{stDestroying, inDied}:      {to: stDestroying},
	{stDestroying, inDestroyed}: {to: stGone, fx: fxWake},
	{stDestroying, inTouch}:     {to: stDestroying},
}

// transitionError is a refused input.
type transitionError struct {
	s     memberState
	in    input
	dirty bool
}

func (e *transitionError) Error() string {
	if e.dirty {
		return fmt.Sprintf("pool member: %s refused while %s and dirty", e.in, e.s)
	}
	return fmt.Sprintf("pool member: %s refused while %s", e.in, e.s)
}

// step applies in to a member in state s with dirty mark dirty and returns
// the new state and mark and the effects to carry out; a refused input
// returns an error and changes nothing.
func step(s memberState, dirty bool, in input) (memberState, bool, effects, error) {
	t, ok := transitions[stateInput{s, in}]
	if !ok || t.cleanOnly && dirty {
		return s, dirty, 0, &transitionError{s: s, in: in, dirty: dirty}
	}
	switch t.dirty {
	case dirtySet:
		dirty = true
	case dirtyClear:
		dirty = false
	}
	return t.to, dirty, t.fx, nil
}
