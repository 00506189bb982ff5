package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Defaults of Options.
const (
	DefaultLeaseDuration = 15 * time.Second
	// DefaultBindGrace is how long a claimed desktop may wait for its bind
	// before its owner gives it back: far above a bind (a warm StartOn) and
	// above BindTimeout, so a slow bind is never clobbered.
	DefaultBindGrace = 30 * time.Second
	// DefaultResync is the publisher's and the claim handler's full pass.
	DefaultResync = 10 * time.Second
	// APITimeout caps one apiserver call on a claim's path: past it the
	// claim fails with ErrUnavailable.
	APITimeout = 5 * time.Second
	// BindTimeout caps a remote bind (a warm StartOn on the owner).
	BindTimeout = 20 * time.Second
	// ClusterTokenHeader carries the cluster token on agent-to-agent calls.
	ClusterTokenHeader = "X-Deskfarm-Cluster-Token"
	// BindPath is the owner's bind route.
	BindPath = "/v1/cluster/bind"
)

// Options configure an Agent.
type Options struct {
	// Config reaches the apiserver (RESTConfig). Required.
	Config *rest.Config
	// Namespace holds the objects; default DefaultNamespace.
	Namespace string
	// Node is this agent's node name. Required; a DNS label.
	Node string
	// AdvertiseURL is this agent's base URL as other agents reach it.
	// Required.
	AdvertiseURL string
	// ClusterToken authenticates agent-to-agent calls (the bind route).
	ClusterToken string
	// LeaseDuration is the node Lease's duration; it is renewed every
	// third of it. Default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// BindGrace: see DefaultBindGrace.
	BindGrace time.Duration
	// Resync: see DefaultResync.
	Resync time.Duration
	// Local is the node's farm. Required.
	Local Local
	// Log receives the agent's logs; default slog.Default().
	Log *slog.Logger
	// HTTPClient makes bind calls; default a client with BindTimeout.
	HTTPClient *http.Client
}

// Stats counts the agent's apiserver traffic since New.
type Stats struct {
	// Claims that won a desktop, and how many of those bound.
	Claims, Bound int64
	// ClaimConflicts are 409s on claim writes (another claimer won).
	ClaimConflicts int64
	// Relists: claims that found every candidate taken and listed afresh.
	Relists int64
	// GiveBacks: desktops given back after a failed bind.
	GiveBacks int64
	// DesktopWrites are successful creates, updates and deletes of Desktop
	// objects (claims, give-backs and the publisher's writes).
	DesktopWrites int64
	// PublisherWrites are the publisher's share of DesktopWrites.
	PublisherWrites int64
	// StatusWrites are DesktopPool and DesktopClaim status updates.
	StatusWrites int64
	// LeaseWrites are node Lease creates and renewals.
	LeaseWrites int64
	// Conflicts are all 409s this agent got.
	Conflicts int64
	// Retries are publisher passes run again after a failed write.
	Retries int64
}

type counters struct {
	claims, bound, claimConflicts, relists, giveBacks        atomic.Int64
	desktopWrites, publisherWrites, statusWrites, leaseWrite atomic.Int64
	conflicts, retries                                       atomic.Int64
}

// Agent joins this node to the cluster: see the package doc. It
// implements Front.
type Agent struct {
	opts Options
	log  *slog.Logger
	http *http.Client

	kube     kubernetes.Interface
	desktops dynamic.ResourceInterface
	pools    dynamic.ResourceInterface
	claims   dynamic.ResourceInterface

	dfactory   dynamicinformer.DynamicSharedInformerFactory
	kfactory   informers.SharedInformerFactory
	desktopInf cache.SharedIndexInformer
	poolInf    cache.SharedIndexInformer
	claimInf   cache.SharedIndexInformer
	leaseInf   cache.SharedIndexInformer
	leases     coordlisters.LeaseNamespaceLister

	n counters
	// lastRenew and upSince (UnixNano) are this agent's last successful
	// Lease renewal and the first of the current run of them: its own
	// evidence that the apiserver serves (lost).
	lastRenew, upSince atomic.Int64
	// renewFail is the current run of failed renewals, nil while they
	// succeed (Health).
	renewFail atomic.Pointer[renewFailure]

	mu sync.Mutex
	// known are the episodes the local pool has held (or StartOn gave it),
	// with when this agent first knew: a leased Desktop whose episode is
	// known has ended here, one whose episode is not is a claim in flight.
	known map[string]knownEpisode
	// tried is, per Desktop, the resourceVersion this agent last wrote a
	// claim against: won or lost, that version is stale, so the cache entry
	// is skipped until the watch brings the next one.
	tried map[string]string
	// claiming are the Desktops this agent's claimers are writing now.
	claiming map[string]bool
	// recent are this agent's own claims its cache may not show yet.
	recent map[string]recentClaim
	rng    *rand.Rand

	publishKick chan struct{}
	poolKick    chan struct{}
	claimKick   chan struct{}
	claimState  claimState

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when run returns
	runErr error
}

var _ Front = (*Agent)(nil)

// Index names on the Desktop informer.
const (
	indexEpisode = "episode"
	indexNode    = "node"
	indexFree    = "free" // pool of free desktops
)

// New builds and starts an agent: it runs until ctx ends or Close is
// called (Run waits for that).
func New(ctx context.Context, opts Options) (*Agent, error) {
	switch {
	case opts.Config == nil:
		return nil, errors.New("cluster agent: no apiserver config")
	case opts.Node == "" || dnsLabel(opts.Node) != opts.Node:
		return nil, fmt.Errorf("cluster agent: node name %q: want a DNS label", opts.Node)
	case opts.AdvertiseURL == "":
		return nil, errors.New("cluster agent: no advertise URL")
	case opts.Local == nil:
		return nil, errors.New("cluster agent: no local pool")
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.LeaseDuration <= 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.BindGrace <= 0 {
		opts.BindGrace = DefaultBindGrace
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: BindTimeout}
	}
	cfg := rest.CopyConfig(opts.Config)
	if cfg.QPS < 100 {
		// client-go's default (5 QPS) would throttle claims on our side.
		cfg.QPS, cfg.Burst = 500, 1000
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster agent: dynamic client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster agent: clientset: %w", err)
	}
	a := &Agent{
		opts: opts, log: opts.Log.With("node", opts.Node), http: opts.HTTPClient, kube: kube,
		desktops:    dyn.Resource(DesktopResource).Namespace(opts.Namespace),
		pools:       dyn.Resource(DesktopPoolResource).Namespace(opts.Namespace),
		claims:      dyn.Resource(DesktopClaimResource).Namespace(opts.Namespace),
		known:       map[string]knownEpisode{},
		tried:       map[string]string{},
		claiming:    map[string]bool{},
		recent:      map[string]recentClaim{},
		rng:         rand.New(rand.NewPCG(rand.Uint64(), uint64(time.Now().UnixNano()))),
		publishKick: make(chan struct{}, 1), poolKick: make(chan struct{}, 1), claimKick: make(chan struct{}, 1),
		claimState: newClaimState(),
	}
	a.ctx, a.cancel = context.WithCancel(ctx)
	a.dfactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, opts.Namespace, nil)
	a.desktopInf = a.dfactory.ForResource(DesktopResource).Informer()
	a.poolInf = a.dfactory.ForResource(DesktopPoolResource).Informer()
	a.claimInf = a.dfactory.ForResource(DesktopClaimResource).Informer()
	a.kfactory = informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(opts.Namespace))
	li := a.kfactory.Coordination().V1().Leases()
	a.leaseInf, a.leases = li.Informer(), li.Lister().Leases(opts.Namespace)
	if err := a.desktopInf.AddIndexers(cache.Indexers{
		indexEpisode: labelIndex(LabelEpisode),
		indexNode:    labelIndex(LabelNode),
		indexFree: func(obj any) ([]string, error) {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok || u.GetLabels()[LabelState] != "free" {
				return nil, nil
			}
			return []string{u.GetLabels()[LabelPool]}, nil
		},
	}); err != nil {
		return nil, fmt.Errorf("cluster agent: indexers: %w", err)
	}
	a.handleEvents()
	a.done = make(chan struct{})
	go func() {
		defer close(a.done)
		a.runErr = a.run()
	}()
	return a, nil
}

func labelIndex(label string) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, nil
		}
		if v := u.GetLabels()[label]; v != "" {
			return []string{v}, nil
		}
		return nil, nil
	}
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// handleEvents wires the informers to the loops: DesktopPool changes to
// the pool reconciler, DesktopClaim changes (and deletes) to the claim
// handler, Desktop changes of this node to the publisher (a claim given
// back, an object deleted by hand).
func (a *Agent) handleEvents() {
	onPool := func(any) { kick(a.poolKick) }
	_, _ = a.poolInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPool, UpdateFunc: func(_, n any) { onPool(n) }, DeleteFunc: onPool})
	_, _ = a.claimInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { kick(a.claimKick) },
		UpdateFunc: func(_, _ any) { kick(a.claimKick) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				a.claimDeleted(u.GetName())
			}
			kick(a.claimKick)
		},
	})
	mine := func(obj any) bool {
		u, ok := obj.(*unstructured.Unstructured)
		return ok && u.GetLabels()[LabelNode] == a.opts.Node
	}
	_, _ = a.desktopInf.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: mine,
		Handler: cache.ResourceEventHandlerFuncs{
			DeleteFunc: func(any) { kick(a.publishKick) },
			UpdateFunc: func(o, n any) {
				// A claim given back (leased -> free) by someone else, or
				// a hand edit: republish. Our own writes echo here too;
				// the pass finds nothing to do for them.
				if o.(*unstructured.Unstructured).GetLabels()[LabelState] != n.(*unstructured.Unstructured).GetLabels()[LabelState] {
					kick(a.publishKick)
				}
			},
		},
	})
}

// Node is this agent's node name.
func (a *Agent) Node() string { return a.opts.Node }

// Stats returns the counters.
func (a *Agent) Stats() Stats {
	n := &a.n
	return Stats{Claims: n.claims.Load(), Bound: n.bound.Load(), ClaimConflicts: n.claimConflicts.Load(),
		Relists: n.relists.Load(), GiveBacks: n.giveBacks.Load(), DesktopWrites: n.desktopWrites.Load(),
		PublisherWrites: n.publisherWrites.Load(), StatusWrites: n.statusWrites.Load(),
		LeaseWrites: n.leaseWrite.Load(), Conflicts: n.conflicts.Load(), Retries: n.retries.Load()}
}

// Run waits until the agent stops: its context ended or Close was called.
func (a *Agent) Run() error {
	<-a.done
	return a.runErr
}

// run starts the informers, the node Lease and the loops, and returns when
// the agent's context ends. Claims fail with ErrUnavailable until the
// caches have synced.
func (a *Agent) run() error {
	ctx := a.ctx
	a.log.Info("cluster agent starting", "op", "cluster", "namespace", a.opts.Namespace,
		"url", a.opts.AdvertiseURL, "lease", a.opts.LeaseDuration)
	// Before the first renewal, which would hide it: was this node lost
	// while its agent was away (killed, or cut off, and back)?
	lostAway := a.wasLost(ctx)
	a.dfactory.Start(ctx.Done())
	a.kfactory.Start(ctx.Done())
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.leaseLoop(ctx) }()
	if lostAway {
		a.endLostEpisodes(ctx)
	}
	if !cache.WaitForCacheSync(ctx.Done(), a.desktopInf.HasSynced, a.poolInf.HasSynced,
		a.claimInf.HasSynced, a.leaseInf.HasSynced) {
		a.wg.Wait()
		return ctx.Err()
	}
	a.log.Info("cluster caches synced", "op", "cluster")
	for _, loop := range []func(context.Context){a.publishLoop, a.poolLoop, a.claimLoop} {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); loop(ctx) }()
	}
	<-ctx.Done()
	a.wg.Wait()
	a.dfactory.Shutdown()
	a.kfactory.Shutdown()
	return nil
}

// Close stops the agent and waits for its loops. It leaves the node Lease
// and the Desktop objects as they are: the Lease expires, and a returning
// agent reconciles its objects.
func (a *Agent) Close() error {
	a.cancel()
	<-a.done
	return nil
}

func (a *Agent) synced() bool {
	return a.desktopInf.HasSynced() && a.leaseInf.HasSynced() && a.poolInf.HasSynced()
}

// knownEpisode is what the agent knows of an episode the local pool held.
type knownEpisode struct{ first, last time.Time }

// markKnown records that the local pool holds (or, from StartOn, will
// show) episode now.
func (a *Agent) markKnown(episode string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.known[episode]
	if !ok {
		k.first = now
	}
	k.last = now
	a.known[episode] = k
}

// knownAt says when this agent first knew the local pool held episode.
func (a *Agent) knownAt(episode string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.known[episode]
	return k.first, ok
}

// forgetKnown drops episodes last held longer than keep ago: their Desktop
// objects have long been republished.
func (a *Agent) forgetKnown(keep time.Duration, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ep, k := range a.known {
		if now.Sub(k.last) > keep {
			delete(a.known, ep)
		}
	}
}
