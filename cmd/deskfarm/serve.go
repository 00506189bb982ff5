package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/osworld"
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
	// Token is the API token (--token, else $DESKFARM_TOKEN). When Listen is
	// reachable beyond loopback and none was given, serve generates one
	// before calling newFarm, so it is never empty in that case.
	Token string
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
}

// Serve defaults.
const (
	defaultListen        = "127.0.0.1:8080"
	defaultStateDir      = "/var/lib/deskfarm"
	defaultCacheDir      = "/var/cache/deskfarm"
	defaultAccel         = "auto"
	defaultLibvirtSocket = "/run/libvirt/libvirt-sock"

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
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API and the live viewers",
		Long: `Serve the HTTP API (/v1), the dashboard and live viewers, and keep the
pools' warm VMs booted. VMs keep running when serve stops; the next serve
finds them again.`,
		Example: `  deskfarm serve --listen 127.0.0.1:8080 --warm desktop
  deskfarm serve --pools pools.yaml --pool desktop.min_warm=2`,
		Args: nArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Token == "" {
				cfg.Token = os.Getenv("DESKFARM_TOKEN")
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
	fs.StringVar(&cfg.Listen, "listen", defaultListen, "host:port to serve the API on; beyond loopback, clients need the token")
	fs.StringVar(&cfg.StateDir, "state-dir", defaultStateDir, "dir for VM overlays, sockets and logs")
	fs.StringVar(&cfg.CacheDir, "cache-dir", defaultCacheDir, "dir of built guest images")
	fs.StringVar(&cfg.Accel, "accel", defaultAccel, "accelerator: auto, kvm or tcg")
	fs.StringVar(&cfg.LibvirtSocket, "libvirt-socket", defaultLibvirtSocket, "libvirtd's unix socket")
	// No default shown: it would print $DESKFARM_TOKEN in --help.
	fs.StringVar(&cfg.Token, "token", "", "API token for non-loopback clients (default $DESKFARM_TOKEN; generated when --listen is not loopback)")
	fs.StringVar(&cfg.NoVNCDir, "novnc-dir", "", "dir of the noVNC npm package, for taking over VMs in the browser (default $DESKFARM_NOVNC_DIR, else "+web.DefaultNoVNCDir+")")
	fs.StringVar(&cfg.Warm, "warm", "", "image of which to keep one ready VM (created in the background at start)")
	fs.StringVar(&cfg.Pools, "pools", "", "pool config file (YAML); default: one pool \"desktop\" of the --warm image")
	fs.StringArrayVar(&cfg.PoolOverrides, "pool", nil, "override a pool setting, POOL.FIELD=VALUE (e.g. desktop.min_warm=2); repeatable")
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
	if cfg.Token == "" && !isLoopback(ln.Addr()) {
		tok, err := randomToken()
		if err != nil {
			ln.Close()
			return err
		}
		cfg.Token = tok
		fmt.Fprintf(out, "deskfarm: --listen %s is reachable beyond this host, so clients there need a token; generated one:\n"+
			"deskfarm: DESKFARM_TOKEN=%s\n", cfg.Listen, tok)
	}

	start := time.Now()
	log.Info("farm starting", "op", "serve", "state_dir", cfg.StateDir, "cache_dir", cfg.CacheDir, "accel", cfg.Accel)
	farm, closeFarm, err := newFarm(ctx, cfg)
	if err != nil {
		ln.Close()
		return fmt.Errorf("start farm: %w", err)
	}
	log.Info("farm started", "op", "serve", "duration", time.Since(start))

	// Requests get this context instead of one that dies with the server,
	// so that we choose when a slow create is canceled.
	reqCtx, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	var inflight sync.WaitGroup
	// One VNC connection per VM, shared by every API client.
	desks := desk.NewPool(farm, log)
	opts := web.Options{Token: cfg.Token, Logger: log, Desks: desks, NoVNCDir: cfg.NoVNCDir}
	if pf, ok := farm.(pooledFarm); ok {
		opts.Pools, opts.Metrics = pf.Pools(), pf.Metrics()
	}
	// OSWorld's in-VM API: a port per osworld VM on the API's host, with
	// the API's authentication.
	ports := &osworld.Ports{Farm: farm, Desks: desks, Host: listenHost(ln.Addr()), Wrap: web.Authenticate(opts), Log: log}
	portsCtx, stopPorts := context.WithCancel(context.Background())
	portsDone := make(chan struct{})
	go func() {
		defer close(portsDone)
		if err := ports.Run(portsCtx); err != nil {
			log.Error("osworld ports", "op", "serve", "err", err)
		}
	}()
	opts.OSWorldAddress = ports.Address
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
	if cfg.Token != "" && !isLoopback(ln.Addr()) {
		fmt.Fprintf(out, "deskfarm: from another host, open %s/?token=TOKEN once (the page keeps it in a cookie)\n", serveURL(ln.Addr()))
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
	stopPorts()
	<-portsDone
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

// randomToken returns 32 random bytes in hex.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate API token: %w", err)
	}
	return hex.EncodeToString(b), nil
}
