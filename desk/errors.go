package desk

import (
	"errors"
	"fmt"
	"time"
)

// Errors of the desk layer. They wrap with %w; test with errors.Is.
var (
	// ErrClosed: the desk (or the whole pool) closed, because its VM died
	// or was destroyed or the farm is shutting down.
	ErrClosed = errors.New("desk closed")
	// ErrHumanControl: an agent's input was refused because a person holds
	// the VM's control. The error is a *HumanControlError.
	ErrHumanControl = errors.New("a person controls the vm")
	// ErrNotInControl: takeover input or a control token that is not the
	// VM's current one.
	ErrNotInControl = errors.New("not the vm's current control token")
	// ErrReset: an agent's run was cut short because its VM was reset
	// under it (a manual reset, or the end of its episode). The error is a
	// *ResetError.
	ErrReset = errors.New("the vm was reset under the run")
)

// ResetError is a run cut short by a reset of its VM: what it had played
// is gone with the rest of the guest's state.
type ResetError struct {
	VM string
	At time.Time // when the reset was seen (vmm.Event.At)
}

func (e *ResetError) Error() string {
	return fmt.Sprintf("actions on vm %s: cut short by a reset of the vm at %s", e.VM, e.At.Format(time.RFC3339Nano))
}

// Unwrap makes the error match ErrReset.
func (e *ResetError) Unwrap() error { return ErrReset }

// HumanControlError is an agent action refused while a person holds control.
type HumanControlError struct {
	VM    string
	Since time.Time
}

func (e *HumanControlError) Error() string {
	return fmt.Sprintf("actions on vm %s: a person has controlled it since %s; "+
		"retry after they hand it back (DELETE /v1/vms/%s/control)", e.VM, e.Since.Format(time.RFC3339), e.VM)
}

// Unwrap makes the error match ErrHumanControl.
func (e *HumanControlError) Unwrap() error { return ErrHumanControl }

// ClosedError says why a desk closed. It matches ErrClosed.
type ClosedError struct {
	VM     string
	Reason string // "vm died: crashed", "vm destroyed", "farm shutting down"
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("display of vm %s closed: %s", e.VM, e.Reason)
}

// Unwrap makes the error match ErrClosed.
func (e *ClosedError) Unwrap() error { return ErrClosed }
