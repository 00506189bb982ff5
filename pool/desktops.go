package pool

import "time"

// DesktopState is a pool VM's state as a cluster publishes it.
type DesktopState string

const (
	DesktopBooting   DesktopState = "booting"
	DesktopFree      DesktopState = "free" // warm, clean, leasable
	DesktopLeased    DesktopState = "leased"
	DesktopResetting DesktopState = "resetting"
	DesktopDead      DesktopState = "dead"
)

// Desktop is one pool VM as Manager.Desktops lists it.
type Desktop struct {
	VM        string
	Pool      string
	State     DesktopState
	Episode   string    // set while leased
	ExpiresAt time.Time // the episode's expiry, while leased
}
