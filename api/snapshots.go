package api

// Named snapshots and forks (issue 17): POST/GET /v1/{vms,episodes}/{id}/snapshots,
// POST .../snapshots/{name}/revert, DELETE .../snapshots/{name}, and
// POST /v1/episodes/{id}/fork.

// SnapshotRequest is the body of POST .../snapshots.
type SnapshotRequest struct {
	// Name is 1-64 of [A-Za-z0-9_.-], starting with a letter or digit;
	// names beginning "deskfarm-" are reserved.
	Name string `json:"name"`
}

// Snapshot is one named snapshot: the answer of POST .../snapshots and an
// item of SnapshotList.
type Snapshot struct {
	Name string `json:"name"`
	// CreatedAt is RFC 3339, UTC.
	CreatedAt string `json:"created_at"`
	// Bytes is its saved RAM and device state; the disk it shares with the
	// VM's overlay is not counted.
	Bytes int64 `json:"bytes"`
	// SaveMS is how long the save took; 0 when not known (after a restart).
	SaveMS int64 `json:"save_ms,omitempty"`
}

// SnapshotList is the answer of GET .../snapshots, oldest first, with the
// limits a save is checked against.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
	MaxCount  int        `json:"max_count"`
	MaxBytes  int64      `json:"max_bytes"`
}

// RevertResponse is the answer of POST .../snapshots/{name}/revert.
type RevertResponse struct {
	ID       string `json:"id"`
	Snapshot string `json:"snapshot"`
	RevertMS int64  `json:"revert_ms"`
}

// ForkRequest is the body of POST /v1/episodes/{id}/fork.
type ForkRequest struct {
	// Count is how many new episodes, 1..MaxFork.
	Count int `json:"count"`
	// TTLS is each new episode's lease in seconds; 0 or absent means the
	// pool's default_ttl_s.
	TTLS float64 `json:"ttl_s,omitempty"`
	// Spread, on a cluster agent, places the new desktops evenly over the
	// live nodes with room (the source's node among them) instead of on
	// the source's node first. Without it a fork goes to other nodes only
	// for what the source's node has no room for.
	Spread bool `json:"spread,omitempty"`
}

// MaxFork bounds ForkRequest.Count.
const MaxFork = 32

// ForkResponse is the answer of POST /v1/episodes/{id}/fork: the new
// episodes, each of the source's pool, on a desktop that started from the
// source's state at the call.
type ForkResponse struct {
	Source   string    `json:"source"`
	Episodes []Episode `json:"episodes"`
	// ForkMS is how long the whole fork took.
	ForkMS int64 `json:"fork_ms"`
	// TemplateBytes is, for a fork across nodes, the size of the fork
	// template (overlay with RAM and device state) each Transfer sent.
	TemplateBytes int64 `json:"template_bytes,omitempty"`
	// Transfers are, on a cluster, the fork template's trips to other
	// nodes: one per node that took a share, whatever its share.
	Transfers []ForkTransfer `json:"transfers,omitempty"`
}

// ForkTransfer is one node's share of a fork across a cluster: the
// template sent to it once, and the desktops it made from it.
type ForkTransfer struct {
	Node  string `json:"node"`
	Count int    `json:"count"`
	// Bytes of the template sent to the node, and how long the node took
	// from the first byte to its answer (receive, check, make its share).
	Bytes int64 `json:"bytes"`
	MS    int64 `json:"ms"`
}

// Snapshot and fork error codes.
const (
	CodeSnapshotNotFound = "snapshot_not_found" // 404: no snapshot of that name
	CodeSnapshotExists   = "snapshot_exists"    // 409: a snapshot of that name exists
	CodeSnapshotLimit    = "snapshot_limit"     // 409: the VM holds its most snapshots or bytes; the message and Field name the limit
	CodeNoSnapshots      = "no_snapshots"       // 501: the server's farm keeps no named snapshots
)
