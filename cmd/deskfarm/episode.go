package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/deskfarm/deskfarm/web"
)

func init() { commands["episode"] = cmdEpisode }

const episodeUsage = `usage: deskfarm episode COMMAND [ARGS]

commands (all take --server URL, default $DESKFARM_SERVER or ` + defaultServer + `;
the API token comes from $DESKFARM_TOKEN):
  deskfarm episode start [--pool NAME] [--ttl SECONDS] [--json]   lease a VM of a pool
  deskfarm episode end [--json] ID...                              reset the VM and return it to its pool
  deskfarm episode ls [--json | -q]                                list live episodes
  deskfarm episode pools [--json]                                  list pools and their sizes
`

func cmdEpisode(args []string) error {
	err := episodeCommand(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

func episodeCommand(args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(vmio.stderr, episodeUsage)
		if len(args) == 0 {
			return errors.New("missing command")
		}
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fs := flag.NewFlagSet("episode "+args[0], flag.ContinueOnError)
	fs.SetOutput(vmio.stderr)
	fs.Usage = func() { fmt.Fprint(vmio.stderr, episodeUsage) }
	server := vmio.getenv("DESKFARM_SERVER")
	if server == "" {
		server = defaultServer
	}
	fs.StringVar(&server, "server", server, "deskfarm API `URL` (also $DESKFARM_SERVER)")
	asJSON := fs.Bool("json", false, "print JSON")
	var err error
	switch args[0] {
	case "start":
		poolName := fs.String("pool", "", "pool `name` (may be omitted when the farm has one pool)")
		ttl := fs.Float64("ttl", 0, "lease in `seconds` (default: the pool's default_ttl_s)")
		if err = parseEpisodeFlags(fs, args[1:], 0); err != nil {
			return err
		}
		var ep web.EpisodeResponse
		err = episodeCall(ctx, server, http.MethodPost, "/v1/episodes", web.StartEpisodeRequest{Pool: *poolName, TTLS: *ttl}, &ep)
		if err != nil {
			return fmt.Errorf("start episode: %w", err)
		}
		if *asJSON {
			return printJSON(ep)
		}
		how := "warm"
		if !ep.Warm {
			how = fmt.Sprintf("booted in %.1fs", ep.BootSeconds)
		}
		fmt.Fprintf(vmio.stdout, "%s\tvm %s\tpool %s\t%s\texpires %s\n%s\n", ep.ID, ep.VM, ep.Pool, how,
			ep.ExpiresAt.Local().Format(time.TimeOnly), ep.ViewerURL)
		return nil
	case "end":
		quiet := fs.Bool("q", false, "print nothing")
		if err = parseEpisodeFlags(fs, args[1:], 1); err != nil {
			return err
		}
		var errs []error
		for _, id := range fs.Args() {
			var ep web.EpisodeResponse
			if err := episodeCall(ctx, server, http.MethodDelete, "/v1/episodes/"+url.PathEscape(id), nil, &ep); err != nil {
				errs = append(errs, fmt.Errorf("end episode %s: %w", id, err))
				continue
			}
			switch {
			case *asJSON:
				printJSON(ep)
			case !*quiet:
				what := fmt.Sprintf("vm %s reset in %.0f ms", ep.VM, ep.ResetSeconds*1000)
				if ep.VMReplaced {
					what = fmt.Sprintf("vm %s could not be reset; destroyed and replaced", ep.VM)
				}
				fmt.Fprintf(vmio.stdout, "%s\tended\t%s\n", ep.ID, what)
			}
		}
		return errors.Join(errs...)
	case "ls":
		quiet := fs.Bool("q", false, "print episode ids only")
		if err = parseEpisodeFlags(fs, args[1:], 0); err != nil {
			return err
		}
		var list web.EpisodeList
		if err := episodeCall(ctx, server, http.MethodGet, "/v1/episodes", nil, &list); err != nil {
			return fmt.Errorf("list episodes: %w", err)
		}
		switch {
		case *asJSON:
			return printJSON(list)
		case *quiet:
			for _, ep := range list.Episodes {
				fmt.Fprintln(vmio.stdout, ep.ID)
			}
			return nil
		}
		tw := tabwriter.NewWriter(vmio.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EPISODE\tVM\tPOOL\tSTATE\tWARM\tEXPIRES IN")
		for _, ep := range list.Episodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", ep.ID, ep.VM, ep.Pool, ep.State, ep.Warm,
				time.Until(ep.ExpiresAt).Round(time.Second))
		}
		return tw.Flush()
	case "pools":
		if err = parseEpisodeFlags(fs, args[1:], 0); err != nil {
			return err
		}
		var list web.PoolList
		if err := episodeCall(ctx, server, http.MethodGet, "/v1/pools", nil, &list); err != nil {
			return fmt.Errorf("list pools: %w", err)
		}
		if *asJSON {
			return printJSON(list)
		}
		tw := tabwriter.NewWriter(vmio.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "POOL\tIMAGE\tWARM\tLEASED\tBOOTING\tENDING\tMIN_WARM\tMAX")
		for _, p := range list.Pools {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Name, p.Image, p.Warm, p.Leased, p.Booting, p.Ending, p.MinWarm, p.Max)
		}
		return tw.Flush()
	}
	fmt.Fprint(vmio.stderr, episodeUsage)
	return fmt.Errorf("unknown command %q", args[0])
}

// parseEpisodeFlags parses flags and checks there are at least minArgs
// positional arguments (and none when minArgs is 0).
func parseEpisodeFlags(fs *flag.FlagSet, args []string, minArgs int) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (minArgs == 0 && fs.NArg() > 0) || fs.NArg() < minArgs {
		fs.Usage()
		return fmt.Errorf("%s: wrong number of arguments", fs.Name())
	}
	return nil
}

func episodeCall(ctx context.Context, server, method, path string, in, out any) error {
	c, err := newAPIClient(server, vmio.getenv("DESKFARM_TOKEN"))
	if err != nil {
		return err
	}
	return c.call(ctx, method, path, in, out)
}
