// Package cluster joins a deskfarm node agent to a Kubernetes cluster.
// Kubernetes holds desired state (DesktopPool), placement and ownership
// (one Desktop object per VM, claimed by a conditional update carrying the
// resourceVersion the claimer read) and liveness (one coordination.k8s.io
// Lease per node). The VMs, their frames, input and files stay with the
// node's own farm (package pool and below); the apiserver sees a few writes
// per episode and never pixels.
//
// The package owns the cluster's objects and the rules over them:
//
//   - Agent runs one node: it renews the node's Lease, publishes the local
//     pool's desktops as Desktop objects, reconciles DesktopPools into the
//     local pool config, serves DesktopClaims, and claims desktops for
//     POST /v1/episodes anywhere in the cluster, preferring its own node.
//   - Claims: the apiserver picks the single winner of an Update carrying
//     a read resourceVersion (409 Conflict for every loser). There are no
//     locks, leader election or consensus of our own.
//   - A node whose Lease is not renewed within its duration is lost: no
//     claim lands on it, and its episodes answer ErrNodeLost.
//   - An apiserver that does not answer makes new claims fail at once with
//     ErrUnavailable; running episodes never need it.
package cluster
