package pool_test

import (
	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/pool"
)

// *pool.Manager is the node's farm a cluster agent runs (cluster.Local).
// The assertion lives here, not in package pool: cluster imports pool.
var _ cluster.Local = (*pool.Manager)(nil)
