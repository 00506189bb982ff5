package api

import "time"

// FarmState is one message of GET /v1/live, the dashboard's feed of
// server-sent events: the whole farm as it is now, sent again whenever it
// changes (a VM's life, a pool's members, an episode, a desk's last action
// or control). Each message replaces the one before it.
type FarmState struct {
	// Seq numbers the messages of one server from 1; a feed may skip
	// numbers (a slow reader gets the newest state, not every one).
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
	// VMs are the farm's VMs, oldest first.
	VMs []LiveVM `json:"vms"`
	// Episodes are the active episodes; empty without pools.
	Episodes []Episode `json:"episodes"`
	// Pools are the warm pools with their counts; empty without pools.
	Pools []Pool `json:"pools"`
}

// LiveVM is a VM on the live feed, with what its desk shows of it.
type LiveVM struct {
	VM
	// Human is set while a person holds the VM's control (takeover).
	Human bool `json:"human"`
	// LastAction describes the last action played on the VM, by agent or
	// person, at LastActionAt; empty before the first.
	LastAction   string     `json:"last_action,omitempty"`
	LastActionAt *time.Time `json:"last_action_at,omitempty"`
	// Pool and Episode say which pool the VM belongs to and which episode
	// holds it; empty when none does.
	Pool    string `json:"pool,omitempty"`
	Episode string `json:"episode,omitempty"`
}
