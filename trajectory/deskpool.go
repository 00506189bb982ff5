package trajectory

import (
	"context"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/pool"
)

// DeskPool and PoolEpisodes adapt a farm's desks and pools for a Manager,
// as serve and the tests wire it.

// DeskPool is Desks over a farm's desk pool: a VM's screen is its desk's
// display (the picture with the cursor, as the agent sees it), and its
// people's input the desk's takeover input.
func DeskPool(p *desk.Pool) Desks { return deskPool{p} }

type deskPool struct{ p *desk.Pool }

func (t deskPool) Screen(ctx context.Context, vm string) (Screen, error) {
	d, err := t.p.Get(ctx, vm)
	if err != nil {
		return nil, err
	}
	return d.Display, nil
}

func (t deskPool) HumanInputs(ctx context.Context, vm string) (<-chan desk.HumanInput, func(), error) {
	d, err := t.p.Get(ctx, vm)
	if err != nil {
		return nil, nil, err
	}
	ch, cancel := d.HumanInputs()
	return ch, cancel, nil
}

// PoolEpisodes is Episodes over a farm's pools: an episode is active while
// it holds its VM.
func PoolEpisodes(m *pool.Manager) Episodes { return poolEpisodes{m} }

type poolEpisodes struct{ m *pool.Manager }

func (t poolEpisodes) Changed() <-chan struct{} { return t.m.Changed() }

func (t poolEpisodes) Active(id string) bool {
	ep, err := t.m.Get(id)
	return err == nil && ep.State == pool.EpisodeActive
}
