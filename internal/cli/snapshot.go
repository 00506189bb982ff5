package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/deskfarm/deskfarm/client"
	"github.com/spf13/cobra"
)

// Named snapshots and forks (issue 17).

// targetOf is the VM or episode an argument names: episode ids begin
// "ep-" (pool's form), VM ids are bare hex.
func targetOf(id string) client.Target {
	if strings.HasPrefix(id, "ep-") {
		return client.Episode(id)
	}
	return client.VM(id)
}

func snapshotCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save, list, revert to and delete named snapshots of a VM or an episode",
		Long: `A named snapshot is the VM's RAM and disk, saved in place: the VM keeps
running and its viewers stay connected. Reverting returns the VM to it in
place, as a reset does to the ready state (held keys released, control
handed back). An episode's snapshots are removed when it ends.

EPISODE_OR_VM is an episode id (ep-...) or a VM id.`,
		Example: `  deskfarm snapshot save ep-0123456789ab before-login
  deskfarm snapshot revert ep-0123456789ab before-login`,
	}
	conn := addServerFlag(env, cmd.PersistentFlags())
	cmd.AddCommand(snapshotSave(env, conn), snapshotList(env, conn), snapshotRevert(env, conn), snapshotDelete(env, conn))
	return cmd
}

func snapshotSave(env *Env, conn *conn) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "save EPISODE_OR_VM NAME",
		Short: "Save the VM's RAM and disk as a named snapshot",
		Args:  nArgs(2, 2, "EPISODE_OR_VM NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			s, err := c.SaveSnapshot(cmd.Context(), targetOf(args[0]), args[1])
			if err != nil {
				return fmt.Errorf("save snapshot %s of %s: %w", args[1], args[0], err)
			}
			if asJSON {
				return printJSON(env.Stdout, s)
			}
			fmt.Fprintf(env.Stdout, "%s\tsaved in %d ms\t%s\n", s.Name, s.SaveMS, mib(s.Bytes))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the snapshot as JSON")
	return cmd
}

func snapshotList(env *Env, conn *conn) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list EPISODE_OR_VM",
		Short: "List the VM's named snapshots, oldest first",
		Args:  nArgs(1, 1, "EPISODE_OR_VM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			list, err := c.Snapshots(cmd.Context(), targetOf(args[0]))
			if err != nil {
				return fmt.Errorf("list snapshots of %s: %w", args[0], err)
			}
			if asJSON {
				return printJSON(env.Stdout, list)
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tCREATED\tSIZE\tSAVE MS")
			var bytes int64
			for _, s := range list.Snapshots {
				created := s.CreatedAt
				if t, err := time.Parse(time.RFC3339, s.CreatedAt); err == nil {
					created = t.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", s.Name, created, mib(s.Bytes), s.SaveMS)
				bytes += s.Bytes
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(env.Stderr, "%d of %d snapshots, %s of %s\n", len(list.Snapshots), list.MaxCount, mib(bytes), mib(list.MaxBytes))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"snapshots":[...],...} as JSON`)
	return cmd
}

func snapshotRevert(env *Env, conn *conn) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "revert EPISODE_OR_VM NAME",
		Short: "Return the VM in place to a named snapshot",
		Args:  nArgs(2, 2, "EPISODE_OR_VM NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			res, err := c.RevertSnapshot(cmd.Context(), targetOf(args[0]), args[1])
			if err != nil {
				return fmt.Errorf("revert %s to snapshot %s: %w", args[0], args[1], err)
			}
			if asJSON {
				return printJSON(env.Stdout, res)
			}
			fmt.Fprintf(env.Stdout, "vm %s\treverted to %s in %d ms\n", res.ID, res.Snapshot, res.RevertMS)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the answer as JSON")
	return cmd
}

func snapshotDelete(env *Env, conn *conn) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete EPISODE_OR_VM NAME...",
		Short: "Delete named snapshots",
		Args:  nArgs(2, -1, "EPISODE_OR_VM and one or more snapshot names"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			t := targetOf(args[0])
			return eachID(args[1:], "delete snapshot", func(name string) error {
				return c.DeleteSnapshot(cmd.Context(), t, name)
			})
		},
	}
	return cmd
}

func episodeFork(env *Env, conn *conn) *cobra.Command {
	var count int
	var ttl float64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Start new episodes from an episode's current state",
		Long: `Fork starts -n new episodes of the episode's pool, each on a desktop that
starts from the episode's RAM and disk now; the episode goes on. The fork is
refused whole when the pool or the host has no room, saying how many would
fit.`,
		Args:              nArgs(1, 1, "an episode ID"),
		ValidArgsFunction: completeEpisodes(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			res, err := c.Fork(cmd.Context(), args[0], count, ttl)
			if err != nil {
				return fmt.Errorf("fork episode %s: %w", args[0], err)
			}
			if asJSON {
				return printJSON(env.Stdout, res)
			}
			for _, ep := range res.Episodes {
				fmt.Fprintf(env.Stdout, "%s\tvm %s\tpool %s\texpires %s\n", ep.ID, ep.VM, ep.Pool, ep.ExpiresAt.Local().Format(time.TimeOnly))
			}
			fmt.Fprintf(env.Stderr, "forked %d from %s in %d ms\n", len(res.Episodes), res.Source, res.ForkMS)
			return nil
		},
	}
	cmd.Flags().IntVarP(&count, "count", "n", 1, "how many new episodes")
	cmd.Flags().Float64Var(&ttl, "ttl", 0, "each new episode's lease in seconds (default: the pool's default_ttl_s)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the fork's answer as JSON")
	return cmd
}

// mib is a byte count in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
