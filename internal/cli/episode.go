package cli

import (
	"context"
	"errors"
	"fmt"
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
	cmd.AddCommand(episodeStart(env, conn), episodeEnd(env, conn), episodeList(env, conn), episodePools(env, conn))
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
			var errs []error
			for _, id := range ids {
				ep, err := c.EndEpisode(cmd.Context(), id)
				if err != nil {
					errs = append(errs, fmt.Errorf("end episode %s: %w", id, err))
					continue
				}
				switch {
				case asJSON:
					printJSON(env.Stdout, ep)
				case !quiet:
					what := fmt.Sprintf("vm %s reset in %.0f ms", ep.VM, ep.ResetSeconds*1000)
					if ep.VMReplaced {
						what = fmt.Sprintf("vm %s could not be reset; destroyed and replaced", ep.VM)
					}
					fmt.Fprintf(env.Stdout, "%s\tended\t%s\n", ep.ID, what)
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the ended episodes as JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing")
	return cmd
}

func episodeList(env *Env, conn *conn) *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List live episodes",
		Args:    nArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			eps, err := c.ListEpisodes(cmd.Context())
			if err != nil {
				return fmt.Errorf("list episodes: %w", err)
			}
			switch {
			case asJSON:
				if eps == nil {
					eps = []api.Episode{}
				}
				return printJSON(env.Stdout, api.EpisodeList{Episodes: eps})
			case quiet:
				for _, ep := range eps {
					fmt.Fprintln(env.Stdout, ep.ID)
				}
				return nil
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "EPISODE\tVM\tPOOL\tSTATE\tWARM\tEXPIRES IN")
			for _, ep := range eps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\n", ep.ID, ep.VM, ep.Pool, ep.State, ep.Warm,
					time.Until(ep.ExpiresAt).Round(time.Second))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"episodes":[...]} as JSON`)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print episode IDs only")
	return cmd
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
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := conn.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		pools, err := c.Pools(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, p := range pools {
			out = append(out, cobra.CompletionWithDesc(p.Name, p.Image))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func completeEpisodes(conn *conn) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		c, err := conn.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		eps, err := c.ListEpisodes(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, ep := range eps {
			out = append(out, cobra.CompletionWithDesc(ep.ID, "vm "+ep.VM+", pool "+ep.Pool))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
