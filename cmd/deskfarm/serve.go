package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/osworld"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
	"github.com/spf13/cobra"
)

// farmConfig is what serve hands to newFarm: the serve flags, validated.
type farmConfig struct {
	// Listen is the API's host:port (--listen). Default 127.0.0.1:8080.
	Listen string
	// StateDir holds one directory per VM (--state-dir). Default /var/lib/deskfarm.
	StateDir string
	// CacheDir holds the built base images (--cache-dir). Default /var/cache/deskfarm.
	CacheDir string
	// Accel is auto, kvm or tcg (--accel). Default auto.
	Accel string
	// LibvirtSocket is libvirtd's unix socket (--libvirt-socket).
	// Default /run/libvirt/libvirt-sock.
	LibvirtSocket string
	// Token is the control token, which can do everything (--token, else
	// $DESKFARM_TOKEN). Empty here means serve takes the one kept in
	// StateDir's token file, or generates one, after newFarm.
	Token string
	// ViewerToken can only watch (--viewer-token, else
	// $DESKFARM_VIEWER_TOKEN); empty as for Token, in the viewer-token file.
	ViewerToken string
	// NoLoopbackTrust is --trust-loopback=false: clients on this host show
	// a token like any other.
	NoLoopbackTrust bool
	// AllowHosts are Host names besides the loopback ones and Listen's host
	// that reach the farm (--allow-host), NAME or NAME:PORT.
	AllowHosts []string
	// NoVNCDir is the noVNC package served for taking over a VM
	// (--novnc-dir); empty: $DESKFARM_NOVNC_DIR, else web.DefaultNoVNCDir.
	NoVNCDir string
	// Warm names an image of which one ready VM should exist (--warm); the
	// farm creates it in the background when none is there. Empty: none.
	Warm string
	// Pools is a pool config file (--pools); empty means the default
	// config: one pool "desktop" of image Warm (or desktop), with one warm
	// VM when Warm is set and none otherwise.
	Pools string
	// PoolOverrides are --pool POOL.FIELD=VALUE settings applied on top.
	PoolOverrides []string
	// Cluster, when set, makes serve a cluster node's agent (cluster.go):
	// --kubeconfig or --cluster. Nil: a single host.
	Cluster *clusterConfig
	// TrajectoryBudget caps the trajectories kept under StateDir
	// (--trajectory-budget); past it the oldest finished go. 0: package
	// trajectory's default.
	TrajectoryBudget int64
	// TrajectoryRetention removes finished trajectories older than this
	// (--trajectory-retention); negative keeps them. 0: the default.
	TrajectoryRetention time.Duration
	// NoKSM is --ksm=false: the host's same-page merging is left as it is.
	// By default the farm turns it on and restores it when closed (ksm.go).
	NoKSM bool
	// NoStandby is --standby=false: no VMs are made ahead
	// (vmm.Config.Standby).
	NoStandby bool
	// MemoryOvercommit is --memory-overcommit: guests may together have
	// this many times the host's memory (vmm.Config.MemoryOvercommit, with
	// its floor on the host's MemAvailable). Default
	// defaultMemoryOvercommit.
	MemoryOvercommit float64
	// BootTimeout bounds a boot from power-on to the guest's ready
	// (--boot-timeout, vmm.Config.BootTimeout); a guest hung in its boot
	// is destroyed then, and its pool boots another after a backoff.
	BootTimeout time.Duration
}

// Serve defaults.
const (
	defaultListen        = "127.0.0.1:8080"
	defaultStateDir      = "/var/lib/deskfarm"
	defaultCacheDir      = "/var/cache/deskfarm"
	defaultAccel         = "auto"
	defaultLibvirtSocket = "/run/libvirt/libvirt-sock"
	// defaultMemoryOvercommit lets 50 idle 1 GiB desktops onto this
	// project's 24 GiB host (libvirt reports 21209 MiB: 3 x (21209 - 2048)
	// MiB is room for 56): with KSM and free page reporting one costs the
	// host a fraction of its guest RAM (docs/benchmarks.md, "Density"),
	// and admission's MemAvailable floor stops creates when the host is
	// actually short.
	defaultMemoryOvercommit = 3
	// defaultBootTimeout is vmm's: a desktop image boots in 30-70 s under
	// TCG on a loaded 2-core host, so 240 s is a hung guest, not a slow
	// one. Under KVM, or for the tiny image (17 s), an operator may cut
	// it so a hung boot is replaced sooner.
	defaultBootTimeout = 240 * time.Second
	minBootTimeout     = 10 * time.Second
	maxBootTimeout     = time.Hour

	// shutdownGrace is how long in-flight requests get to finish after
	// SIGINT/SIGTERM; then they are canceled (a create removes what it made).
	shutdownGrace = 30 * time.Second
	// cancelGrace is how long canceled requests get to clean up.
	cancelGrace = 30 * time.Second
)

// validate checks the config's fields.
func (c farmConfig) validate() error {
	switch {
	case c.Listen == "":
		return errors.New("--listen is empty")
	case c.StateDir == "":
		return errors.New("--state-dir is empty")
	case c.CacheDir == "":
		return errors.New("--cache-dir is empty")
	case c.LibvirtSocket == "":
		return errors.New("--libvirt-socket is empty")
	case c.MemoryOvercommit < 1:
		return fmt.Errorf("--memory-overcommit %g: want 1 (none) or more", c.MemoryOvercommit)
	case c.BootTimeout < minBootTimeout || c.BootTimeout > maxBootTimeout:
		return fmt.Errorf("--boot-timeout %s: want a duration from %s to %s, e.g. 240s", c.BootTimeout, minBootTimeout, maxBootTimeout)
	case c.Token != "" && c.Token == c.ViewerToken:
		return errors.New("--viewer-token is the same as --token: a viewer would hold the control token")
	case c.Cluster != nil && (c.Cluster.Token == c.Token || c.Cluster.Token == c.ViewerToken):
		return errors.New("the cluster token is the same as --token or --viewer-token: a client would pass for an agent")
	}
	for _, h := range c.AllowHosts {
		if h == "" || strings.ContainsAny(h, "/ ") {
			return fmt.Errorf("--allow-host %q: want NAME or NAME:PORT, e.g. farm.example.com", h)
		}
	}
	switch c.Accel {
	case "auto", "kvm", "tcg":
	default:
		return fmt.Errorf("--accel %q: want auto, kvm or tcg", c.Accel)
	}
	return nil
}

// newFarm builds the VM layer for serve. It is assigned in another file of
// this package, by the build that links a backend.
//
// ctx bounds the setup only (it is canceled by SIGINT/SIGTERM, also during
// setup); the farm must not keep it. The returned close stops the farm's
// background work and releases its connections; serve calls it once, after
// the HTTP server has shut down. close must not destroy VMs: the next serve
// finds them again.
var newFarm func(ctx context.Context, cfg farmConfig) (vmm.Farm, func() error, error)

func serveCommand(stop func()) *cobra.Command {
	var cfg farmConfig
	var trustLoopback bool
	var cf clusterFlags
	var budget, retention string
	var ksmOn, standbyOn bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API and the live viewers",
		Long: `Serve the HTTP API (/v1), the dashboard and live viewers, and keep the
pools' warm VMs booted. VMs keep running when serve stops; the next serve
finds them again.`,
		Example: `  deskfarm serve --listen 127.0.0.1:8080 --warm desktop
  deskfarm serve --pools pools.yaml --pool desktop.min_warm=2
  deskfarm serve --listen 0.0.0.0:8080 --kubeconfig kubeconfig --node n1 --advertise http://10.0.0.5:8080 --cluster-token-file ct`,
		Args: nArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Token == "" {
				cfg.Token = os.Getenv("DESKFARM_TOKEN")
			}
			if cfg.ViewerToken == "" {
				cfg.ViewerToken = os.Getenv("DESKFARM_VIEWER_TOKEN")
			}
			cfg.NoLoopbackTrust = !trustLoopback
			cfg.NoKSM = !ksmOn
			cfg.NoStandby = !standbyOn
			var err error
			if cfg.TrajectoryBudget, err = parseBytes(budget); err != nil {
				return fmt.Errorf("--trajectory-budget %w", err)
			}
			if cfg.TrajectoryRetention, err = parseRetention(retention); err != nil {
				return fmt.Errorf("--trajectory-retention %w", err)
			}
			if cfg.Cluster, err = resolveCluster(cmd, cf, os.Getenv, os.Hostname); err != nil {
				return err
			}
			if err := cfg.validate(); err != nil {
				return err
			}
			if newFarm == nil {
				return errors.New("this build has no VM backend (newFarm is unset)")
			}
			// Listen before building the farm, so a busy port fails fast.
			ln, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
			}
			return runServe(cmd.Context(), stop, cfg, ln, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&cfg.Listen, "listen", defaultListen, "host:port to serve the API on; beyond loopback, clients need a token")
	fs.StringVar(&cfg.StateDir, "state-dir", defaultStateDir, "dir for VM overlays, sockets, logs and the token files")
	fs.StringVar(&cfg.CacheDir, "cache-dir", defaultCacheDir, "dir of built guest images")
	fs.StringVar(&cfg.Accel, "accel", defaultAccel, "accelerator: auto, kvm or tcg")
	fs.StringVar(&cfg.LibvirtSocket, "libvirt-socket", defaultLibvirtSocket, "libvirtd's unix socket")
	// No default shown: it would print $DESKFARM_TOKEN in --help.
	fs.StringVar(&cfg.Token, "token", "", "control token: can do everything (default $DESKFARM_TOKEN, else the one in STATE-DIR/token, else generated there)")
	fs.StringVar(&cfg.ViewerToken, "viewer-token", "", "viewer token: can watch, never act (default $DESKFARM_VIEWER_TOKEN, else STATE-DIR/viewer-token, else generated there)")
	fs.BoolVar(&trustLoopback, "trust-loopback", true, "let clients on this host in without a token; turn off behind a reverse proxy or ssh tunnel, or when other users share the host")
	fs.StringArrayVar(&cfg.AllowHosts, "allow-host", nil, "a Host name (NAME or NAME:PORT) the farm answers to besides loopback names and --listen's host, e.g. the name of a proxy in front; repeatable")
	fs.StringVar(&cfg.NoVNCDir, "novnc-dir", "", "dir of the noVNC npm package, for taking over VMs in the browser (default $DESKFARM_NOVNC_DIR, else "+web.DefaultNoVNCDir+")")
	fs.StringVar(&cfg.Warm, "warm", "", "image of which to keep one ready VM (created in the background at start)")
	fs.StringVar(&cfg.Pools, "pools", "", "pool config file (YAML); default: one pool \"desktop\" of the --warm image")
	fs.StringArrayVar(&cfg.PoolOverrides, "pool", nil, "override a pool setting, POOL.FIELD=VALUE (e.g. desktop.min_warm=2); repeatable")
	fs.StringVar(&budget, "trajectory-budget", "20GiB", "disk the recorded trajectories (STATE-DIR/trajectories) may take; past it the oldest finished are removed")
	fs.StringVar(&retention, "trajectory-retention", "7d", "age past which finished trajectories are removed, e.g. 7d or 36h; negative keeps them")
	fs.Float64Var(&cfg.MemoryOvercommit, "memory-overcommit", defaultMemoryOvercommit, "guests may together have this many times the host's memory (less 2 GiB kept for it); above 1, creates also stop while the host's MemAvailable is short")
	fs.DurationVar(&cfg.BootTimeout, "boot-timeout", defaultBootTimeout, "how long a VM's boot may take to its desktop being ready; a guest hung in its boot is destroyed then, and its pool boots another")
	fs.BoolVar(&standbyOn, "standby", true, "keep one VM per image and size in use made ahead and paused, so the next create from saved state only continues it (about 0.05 s instead of 2); it holds the memory of an idle VM until a create needs it")
	fs.BoolVar(&ksmOn, "ksm", true, "merge the guests' identical pages with the kernel's KSM while serving (as root, where /sys/kernel/mm/ksm is writable); the host's settings are restored on exit")
	addClusterFlags(cmd, &cf) // cluster.go
	cmd.MarkFlagFilename("pools", "yaml", "yml")
	cmd.MarkFlagDirname("novnc-dir")
	cmd.MarkFlagDirname("state-dir")
	cmd.MarkFlagDirname("cache-dir")
	cmd.RegisterFlagCompletionFunc("accel", cobra.FixedCompletions([]cobra.Completion{"auto", "kvm", "tcg"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// nArgs accepts exactly n positional arguments.
func nArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("unexpected arguments %q (see %s --help)", args, cmd.CommandPath())
		}
		return nil
	}
}

// runServe serves the API on ln until ctx is done, then shuts down: it
// stops accepting, lets requests finish (shutdownGrace), cancels the rest,
// and closes the farm. VMs keep running. stop is called once shutdown
// begins, so that a second signal kills the process. ln is closed on return.
func runServe(ctx context.Context, stop func(), cfg farmConfig, ln net.Listener, out io.Writer) error {
	log := slog.Default()
	if newFarm == nil {
		ln.Close()
		return errors.New("this build has no VM backend (newFarm is unset)")
	}
	start := time.Now()
	log.Info("farm starting", "op", "serve", "state_dir", cfg.StateDir, "cache_dir", cfg.CacheDir, "accel", cfg.Accel)
	farm, closeFarm, err := newFarm(ctx, cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("start farm: %w", err)
	}
	log.Info("farm started", "op", "serve", "duration", time.Since(start))
	// After newFarm, which makes the state dir.
	if cfg.Token, err = keepToken(filepath.Join(cfg.StateDir, tokenFile), cfg.Token); err == nil {
		cfg.ViewerToken, err = keepToken(filepath.Join(cfg.StateDir, viewerTokenFile), cfg.ViewerToken)
	}
	if err == nil && cfg.Token == cfg.ViewerToken {
		err = fmt.Errorf("the viewer token in %s is the control token: remove the file and restart", filepath.Join(cfg.StateDir, viewerTokenFile))
	}
	if err != nil {
		ln.Close()
		return errors.Join(err, closeFarm())
	}

	// Requests get this context instead of one that dies with the server,
	// so that we choose when a slow create is canceled.
	reqCtx, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	var inflight sync.WaitGroup
	// One VNC connection per VM, shared by every API client.
	desks := desk.NewPool(farm, log)
	traj, err := newTrajectories(cfg, farm, desks, log) // trajectories.go
	if err != nil {
		ln.Close()
		desks.Close()
		return errors.Join(fmt.Errorf("open the trajectories: %w", err), closeFarm())
	}
	opts := web.Options{Token: cfg.Token, ViewerToken: cfg.ViewerToken, Logger: log, Desks: desks, NoVNCDir: cfg.NoVNCDir,
		AllowedHosts: allowedHosts(cfg), Trajectories: traj}
	if cfg.NoLoopbackTrust {
		opts.TrustedNets = []netip.Prefix{}
	}
	if pf, ok := farm.(pooledFarm); ok {
		opts.Pools, opts.Metrics = pf.Pools(), pf.Metrics()
	}
	// A cluster node's agent runs until the server has shut down.
	agentCtx, stopAgent := context.WithCancel(context.Background())
	defer stopAgent()
	if cfg.Cluster != nil {
		if opts.Pools == nil {
			err = errors.New("cluster mode: this build's farm has no pools")
		} else {
			opts.Cluster, err = startAgent(agentCtx, cfg.Cluster, opts.Pools, log) // clusteragent.go
		}
		if err != nil {
			ln.Close()
			return errors.Join(fmt.Errorf("join the cluster as node %s: %w", cfg.Cluster.Node, err), closeFarm())
		}
		opts.ClusterToken, opts.AdvertiseURL = cfg.Cluster.Token, cfg.Cluster.Advertise
		log.Info("joined the cluster", "op", "serve", "node", cfg.Cluster.Node, "namespace", cfg.Cluster.Namespace,
			"advertise", cfg.Cluster.Advertise)
	}
	// OSWorld's in-VM API: a port per osworld VM on the API's host, with
	// the API's authentication.
	ports := &osworld.Ports{Farm: farm, Desks: desks, Host: listenHost(ln.Addr()), Wrap: web.Authenticate(opts), Log: log}
	if cfg.Cluster != nil {
		// Clients on other nodes reach this one's ports at its advertised name.
		ports.AdvertiseHost = advertiseName(cfg.Cluster.Advertise)
	}
	portsCtx, stopPorts := context.WithCancel(context.Background())
	portsDone := make(chan struct{})
	go func() {
		defer close(portsDone)
		if err := ports.Run(portsCtx); err != nil {
			log.Error("osworld ports", "op", "serve", "err", err)
		}
	}()
	opts.OSWorldAddress = ports.Address
	// Recordings end with their episodes, and all of them once the server
	// has shut down (their trajectories finished, not interrupted).
	var eps trajectory.Episodes
	if opts.Pools != nil {
		eps = trajectory.PoolEpisodes(opts.Pools)
	}
	trajCtx, stopTraj := context.WithCancel(context.Background())
	trajDone := make(chan struct{})
	go func() {
		defer close(trajDone)
		if err := traj.Run(trajCtx, eps); err != nil && !errors.Is(err, context.Canceled) {
			log.Error("trajectories", "op", "trajectory", "err", err)
		}
	}()
	api := web.NewServer(farm, opts)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			api.ServeHTTP(w, r)
		}),
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No ReadTimeout or WriteTimeout: a create lasts a boot, an exec up
		// to an hour, an upload 64 MiB. Client cancellation ends them.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(out, "deskfarm: serving on %s\n", serveURL(ln.Addr()))
	fmt.Fprintf(out, "deskfarm: watch the desktops at %s/ (wall: %s/wall)\n", serveURL(ln.Addr()), serveURL(ln.Addr()))
	fmt.Fprintf(out, "deskfarm: control token in %s, viewer token in %s (mode 0600; the CLI on this host reads the first)\n",
		filepath.Join(cfg.StateDir, tokenFile), filepath.Join(cfg.StateDir, viewerTokenFile))
	if cfg.NoLoopbackTrust || !isLoopback(ln.Addr()) {
		fmt.Fprintf(out, "deskfarm: clients need a token: open %s/?token=TOKEN once in a browser (the page keeps it in a cookie), "+
			"or set DESKFARM_TOKEN\n", serveURL(ln.Addr()))
	}

	var errs []error
	select {
	case err := <-served:
		errs = append(errs, fmt.Errorf("serve on %s: %w", ln.Addr(), err))
	case <-ctx.Done():
		stop()
		log.Info("shutting down; VMs keep running", "op", "serve", "grace", shutdownGrace)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		err := srv.Shutdown(sctx)
		cancel()
		if err != nil {
			log.Warn("requests still running after grace; canceling them", "op", "serve", "err", err)
			cancelRequests()
			if !waitTimeout(&inflight, cancelGrace) {
				errs = append(errs, fmt.Errorf("shut down http server: requests still running %s after cancel", cancelGrace))
			}
			srv.Close()
		}
	}
	stopAgent()
	stopPorts()
	<-portsDone
	stopTraj()
	<-trajDone
	desks.Close()
	if err := closeFarm(); err != nil {
		errs = append(errs, fmt.Errorf("close farm: %w", err))
	}
	log.Info("stopped", "op", "serve")
	return errors.Join(errs...)
}

// listenHost is the IP the API listens on, for the listeners that follow
// its rules.
func listenHost(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok && tcp.IP != nil {
		return tcp.IP.String()
	}
	return "127.0.0.1"
}

// waitTimeout waits for wg up to d and reports whether it finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// isLoopback reports whether a listener address is reachable only from
// this host.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// serveURL is the base URL for a listener address. For a wildcard
// address it names this host, which is what a remote client would use.
func serveURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return "http://" + addr.String()
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port)) + " (all interfaces)"
}

// Token files in the state dir, mode 0600: the farm reuses them across
// restarts (bookmarked viewer links and scripts keep working), and the CLI
// on this host reads the control token from there (client.TokenFor).
// Remove a file and restart to change its token.
const (
	tokenFile       = "token"
	viewerTokenFile = "viewer-token"
)

// keepToken returns tok, else the token kept in path, else a new one, and
// keeps what it returns in path. The file is replaced, never rewritten in
// place, so that it is 0600 whatever mode an older one had.
func keepToken(path, tok string) (string, error) {
	if tok == "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil:
			tok = strings.TrimSpace(string(b))
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("read token: %w", err)
		}
	}
	if tok == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("generate token for %s: %w", path, err)
		}
		tok = hex.EncodeToString(b)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return "", fmt.Errorf("keep token: %w", err)
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Chmod(0o600) // CreateTemp's mode already; say it
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("keep token in %s: %w", path, err)
	}
	return tok, nil
}

// allowedHosts are the Host names the farm answers to besides loopback
// ones: --allow-host, and --listen's host unless it is a wildcard.
func allowedHosts(cfg farmConfig) []string {
	hosts := slices.Clone(cfg.AllowHosts)
	if cfg.Cluster != nil {
		hosts = append(hosts, advertiseHost(cfg.Cluster.Advertise))
	}
	if h, _, err := net.SplitHostPort(cfg.Listen); err == nil && h != "" {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, h)
		}
	}
	return hosts
}
