package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/spf13/cobra"
)

func episodeCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "episode",
		Short: "Lease clean VMs from the farm's warm pools",
		Long: `An episode leases a VM of a pool (deskfarm serve --pools FILE or --warm
IMAGE). Ending it resets the VM and returns it to the pool.

The server is --server, else $DESKFARM_SERVER, else ` + client.DefaultServer + `;
the API token, when the server needs one, is $DESKFARM_TOKEN.`,
	}
	conn := addServerFlag(env, cmd.PersistentFlags())
	cmd.AddCommand(episodeStart(env, conn), episodeEnd(env, conn), episodeList(env, conn), episodePools(env, conn), episodeExport(env, conn),
		episodeFork(env, conn))
	return cmd
}

func episodeStart(env *Env, conn *conn) *cobra.Command {
	var req api.StartEpisodeRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Lease a VM of a pool",
		Args:  nArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			ep, err := c.StartEpisode(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("start episode: %w", err)
			}
			if asJSON {
				return printJSON(env.Stdout, ep)
			}
			how := "warm"
			if !ep.Warm {
				how = fmt.Sprintf("booted in %.1fs", ep.BootSeconds)
			}
			fmt.Fprintf(env.Stdout, "%s\tvm %s\tpool %s\t%s\texpires %s\n%s\n", ep.ID, ep.VM, ep.Pool, how,
				ep.ExpiresAt.Local().Format(time.TimeOnly), ep.ViewerURL)
			if ep.Node != "" {
				// A cluster's: any agent serves the episode; this is its owner.
				fmt.Fprintf(env.Stdout, "node %s\t%s\n", ep.Node, ep.URL)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Pool, "pool", "", "pool name (may be omitted when the farm has one pool)")
	cmd.Flags().Float64Var(&req.TTLS, "ttl", 0, "lease in seconds (default: the pool's default_ttl_s)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the episode as JSON")
	cmd.RegisterFlagCompletionFunc("pool", completePools(conn))
	return cmd
}

func episodeEnd(env *Env, conn *conn) *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:               "end ID...",
		Short:             "End episodes: reset their VMs and return them to their pools",
		Args:              nArgs(1, -1, "one or more episode IDs"),
		ValidArgsFunction: completeEpisodes(conn),
		RunE: func(cmd *cobra.Command, ids []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			return eachID(ids, "end episode", func(id string) error {
				ep, err := c.EndEpisode(cmd.Context(), id)
				if err != nil {
					return err
				}
				switch {
				case asJSON:
					return printJSON(env.Stdout, ep)
				case !quiet:
					what := fmt.Sprintf("vm %s reset in %.0f ms", ep.VM, ep.ResetSeconds*1000)
					if ep.VMReplaced {
						what = fmt.Sprintf("vm %s could not be reset; destroyed and replaced", ep.VM)
					}
					fmt.Fprintf(env.Stdout, "%s\tended\t%s\n", ep.ID, what)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the ended episodes as JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing")
	return cmd
}

func episodeList(env *Env, conn *conn) *cobra.Command {
	return listCommand(env, conn, listSpec[api.Episode]{
		use: "episodes", short: "List live episodes",
		jsonHelp: `print {"episodes":[...]} as JSON`, quietHelp: "print episode IDs only",
		fetch: (*client.Client).ListEpisodes,
		wrap:  func(eps []api.Episode) any { return api.EpisodeList{Episodes: eps} },
		id:    func(ep api.Episode) string { return ep.ID },
		table: func(w io.Writer, eps []api.Episode) error {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "EPISODE\tVM\tPOOL\tSTATE\tWARM\tEXPIRES IN")
			for _, ep := range eps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", ep.ID, ep.VM, ep.Pool, ep.State, ep.Warm,
					time.Until(ep.ExpiresAt).Round(time.Second))
			}
			return tw.Flush()
		},
	})
}

func episodePools(env *Env, conn *conn) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "List pools and their sizes",
		Args:  nArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			pools, err := c.Pools(cmd.Context())
			if err != nil {
				return fmt.Errorf("list pools: %w", err)
			}
			if asJSON {
				if pools == nil {
					pools = []api.Pool{}
				}
				return printJSON(env.Stdout, api.PoolList{Pools: pools})
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "POOL\tIMAGE\tWARM\tLEASED\tBOOTING\tENDING\tMIN_WARM\tMAX")
			for _, p := range pools {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", p.Name, p.Image, p.Warm, p.Leased, p.Booting, p.Ending, p.MinWarm, p.Max)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"pools":[...]} as JSON`)
	return cmd
}

func completePools(conn *conn) cobra.CompletionFunc {
	return completeFrom(conn, (*client.Client).Pools, func(p api.Pool) (string, string) { return p.Name, p.Image })
}

func completeEpisodes(conn *conn) cobra.CompletionFunc {
	return completeFrom(conn, (*client.Client).ListEpisodes, func(ep api.Episode) (string, string) {
		return ep.ID, "vm " + ep.VM + ", pool " + ep.Pool
	})
}
