package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/deskfarm/deskfarm/api"
)

// Named snapshots and forks (issue 17).

// SaveSnapshot saves the target's RAM and disk in place as the named
// snapshot; the VM keeps running. A name taken is 409 snapshot_exists, a
// limit reached 409 snapshot_limit (Field names the limit).
func (c *Client) SaveSnapshot(ctx context.Context, t Target, name string) (api.Snapshot, error) {
	var res api.Snapshot
	err := c.call(ctx, http.MethodPost, t.path("snapshots"), api.SnapshotRequest{Name: name}, &res)
	return res, err
}

// Snapshots lists the target's named snapshots, oldest first, with the
// limits a save is checked against.
func (c *Client) Snapshots(ctx context.Context, t Target) (api.SnapshotList, error) {
	var res api.SnapshotList
	err := c.call(ctx, http.MethodGet, t.path("snapshots"), nil, &res)
	return res, err
}

// RevertSnapshot returns the target's VM in place to the named snapshot,
// as a reset does to the ready one (held input released, control handed
// back); an episode goes on.
func (c *Client) RevertSnapshot(ctx context.Context, t Target, name string) (api.RevertResponse, error) {
	var res api.RevertResponse
	err := c.call(ctx, http.MethodPost, t.path("snapshots", url.PathEscape(name), "revert"), nil, &res)
	return res, err
}

// DeleteSnapshot removes the named snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, t Target, name string) error {
	return c.call(ctx, http.MethodDelete, t.path("snapshots", url.PathEscape(name)), nil, nil)
}

// Fork starts count new episodes of the episode's pool, each on a desktop
// that starts from the episode's state now; the episode goes on. ttlS is
// each new episode's lease in seconds (0: the pool's default). A fork that
// does not fit is refused whole, saying how many would.
func (c *Client) Fork(ctx context.Context, episode string, count int, ttlS float64) (api.ForkResponse, error) {
	return c.ForkWith(ctx, episode, api.ForkRequest{Count: count, TTLS: ttlS})
}

// ForkWith is Fork with every option of the request (Spread).
func (c *Client) ForkWith(ctx context.Context, episode string, req api.ForkRequest) (api.ForkResponse, error) {
	var res api.ForkResponse
	err := c.call(ctx, http.MethodPost, Episode(episode).path("fork"), req, &res)
	return res, err
}
