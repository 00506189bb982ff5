package cli

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	trajreplay "github.com/deskfarm/deskfarm/internal/replay"
	"github.com/spf13/cobra"
)

// Recorded trajectories (issue 16): `deskfarm episode export` writes one
// as a directory, `deskfarm trajectories` lists them, `deskfarm replay`
// plays one again.

func episodeExport(env *Env, conn *conn) *cobra.Command {
	return &cobra.Command{
		Use:   "export ID DIR",
		Short: "Write a recorded episode's trajectory into a directory",
		Long: `Write the trajectory of a recorded episode (started with record, or in a pool
that records) into DIR, which is created if needed: OSWorld's result layout
(traj.jsonl, a step_N_TIME.png per step, recording.mp4, result.txt when a result
was set) and deskfarm/, the trajectory as the farm stores it (trajectory.jsonl,
info.json, screens/, native/, ...). The trajectory outlives its episode, so an
ended episode exports too. Files already in DIR are overwritten.`,
		Args:              nArgs(2, 2, "an episode ID and a directory"),
		ValidArgsFunction: completeTrajectories(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			n, err := exportTo(cmd.Context(), c, args[0], args[1])
			if err != nil {
				return fmt.Errorf("export %s: %w", args[0], err)
			}
			fmt.Fprintf(env.Stdout, "%s\t%d files\t%s\n", args[0], n, args[1])
			return nil
		},
	}
}

// exportTo streams the trajectory id as a tar into dir and returns the
// files written. The trajectory's own route serves it after its episode
// ended; the episode's route is the fallback for a token scoped to the
// episode.
func exportTo(ctx context.Context, c *client.Client, id, dir string) (int, error) {
	rc, err := c.ExportTrajectory(ctx, id, api.ExportTar)
	if e, ok := errors.AsType[*api.Error](err); ok && (e.Status == 403 || e.Status == 404) {
		if rc2, err2 := c.ExportEpisodeTrajectory(ctx, id, api.ExportTar); err2 == nil {
			rc, err = rc2, nil
		}
	}
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return untar(rc, dir)
}

// untar writes the regular files and directories of a tar stream under
// dir. An entry whose name leaves dir (absolute, "..") or that is anything
// else (a link, a device) is refused and stops the export: an archive from
// a server is not trusted to write outside where it was asked to.
func untar(r io.Reader, dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	files := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return files, fmt.Errorf("read the archive: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || name == "." {
			continue
		}
		if !filepath.IsLocal(name) || strings.Contains(h.Name, `\`) {
			return files, fmt.Errorf("archive entry %q: refused: its path leaves %s", h.Name, dir)
		}
		name = path.Clean(name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return files, err
			}
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return files, err
				}
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return files, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return files, fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
			}
			files++
		default:
			return files, fmt.Errorf("archive entry %q: refused: not a regular file or directory (type %q)", h.Name, h.Typeflag)
		}
	}
}

func trajectoriesCommand(env *Env) *cobra.Command {
	var asJSON, quiet bool
	var conn *conn
	cmd := &cobra.Command{
		Use:     "trajectories",
		Aliases: []string{"traj"},
		Short:   "List recorded trajectories, newest first",
		Long: `List the trajectories the farm keeps (recorded episodes and VM recordings), newest
first, and what they take of the farm's budget. Export one with
deskfarm episode export ID DIR; watch it at its URL.`,
		Args: nArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			list, err := c.ListTrajectories(cmd.Context())
			if err != nil {
				return fmt.Errorf("list trajectories: %w", err)
			}
			switch {
			case asJSON:
				if list.Trajectories == nil {
					list.Trajectories = []api.TrajectoryInfo{}
				}
				return printJSON(env.Stdout, list)
			case quiet:
				for _, t := range list.Trajectories {
					fmt.Fprintln(env.Stdout, t.ID)
				}
				return nil
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TRAJECTORY\tVM\tPOOL\tSTATE\tSTEPS\tSIZE\tVIDEO\tSTARTED\tNOTE")
			for _, t := range list.Trajectories {
				video := "-"
				if t.Video != "" {
					video = fmt.Sprintf("%.0fs", t.VideoSeconds)
				}
				note := t.Stopped
				if note == "" {
					note = t.EndReason
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.ID, t.VM, orDash(t.Pool), t.State, t.Steps,
					bytesText(t.Bytes), video, age(t.StartedAt), note)
			}
			fmt.Fprintf(tw, "\ntotal %s of %s\n", bytesText(list.TotalBytes), bytesText(list.BudgetBytes))
			return tw.Flush()
		},
	}
	conn = addServerFlag(env, cmd.Flags())
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"trajectories":[...],...} as JSON`)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print trajectory IDs only")
	return cmd
}

func replayCommand(env *Env) *cobra.Command {
	var opts trajreplay.Options
	var asJSON bool
	var conn *conn
	cmd := &cobra.Command{
		Use:   "replay DIR",
		Short: "Play a recorded trajectory again on a fresh episode and compare the screens",
		Long: `Start an episode, play each recorded step of the trajectory in DIR (as
deskfarm episode export wrote it) in order -- an agent's steps as the neutral
actions they became, at their screenshot size; a person's at native size; exec
steps again -- and compare each step's screenshot with the recorded one.

The distance is "mismatch": the fraction of pixels whose largest channel
differs by more than 32 (of 255). A step past --threshold diverged; the exit
status is non-zero when any step did, and the first one is named.`,
		Example: `  deskfarm episode export ep-0123456789ab ./ep1
  deskfarm replay ./ep1 --pool desktop`,
		Args: nArgs(1, 1, "a trajectory directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			tr, err := trajreplay.Load(args[0])
			if err != nil {
				return err
			}
			c, err := conn.client()
			if err != nil {
				return err
			}
			if !asJSON {
				opts.Log = env.Stdout
			}
			rep, err := trajreplay.Run(cmd.Context(), c, tr, opts)
			if asJSON && rep.Episode != "" {
				if perr := printJSON(env.Stdout, rep); perr != nil {
					return perr
				}
			}
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(env.Stdout, "reproduced all %d steps (%s <= %g)\n", len(rep.Steps), rep.Distance, rep.Threshold)
			}
			return nil
		},
	}
	conn = addServerFlag(env, cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&opts.Pool, "pool", "", "pool of the replay's episode (default: the recording's)")
	f.Float64Var(&opts.Threshold, "threshold", trajreplay.DefaultThreshold, "mismatch distance past which a step diverged")
	f.BoolVar(&opts.KeepTiming, "keep-timing", false, "wait between steps as long as the recording did")
	f.StringVar(&opts.SaveDir, "save", "", "write each replayed screenshot to this directory as step_N.png")
	f.BoolVar(&opts.KeepEpisode, "keep", false, "leave the replay's episode running at the end")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.RegisterFlagCompletionFunc("pool", completePools(conn))
	return cmd
}

func completeTrajectories(conn *conn) cobra.CompletionFunc {
	return completeFrom(conn, func(c *client.Client, ctx context.Context) ([]api.TrajectoryInfo, error) {
		list, err := c.ListTrajectories(ctx)
		return list.Trajectories, err
	}, func(t api.TrajectoryInfo) (string, string) {
		return t.ID, fmt.Sprintf("%s, %d steps", t.State, t.Steps)
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// bytesText says a size in binary units: 812 B, 3.4 MiB, 20.0 GiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
