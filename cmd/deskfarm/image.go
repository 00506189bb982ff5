package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/deskfarm/deskfarm/images"
	"github.com/spf13/cobra"
)

func imageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build, list and prune guest images",
		Long: fmt.Sprintf(`Build, list and prune guest images. Builds are cached by the hash of
their recipe, so a build of an unchanged recipe is instant.

images: %s`, strings.Join(images.Names(), ", ")),
	}
	var cache string
	cmd.PersistentFlags().StringVar(&cache, "cache", images.DefaultCacheDir, "cache directory")
	cmd.MarkPersistentFlagDirname("cache")

	var force bool
	build := &cobra.Command{
		Use:       "build NAME...",
		Short:     "Build images (cached unless --force)",
		ValidArgs: images.Names(),
		RunE: func(cmd *cobra.Command, names []string) error {
			return imageBuild(cmd.Context(), cmd.OutOrStdout(), cache, force, names)
		},
	}
	build.Flags().BoolVar(&force, "force", false, "rebuild even if the current recipe is cached")

	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List recipes and cached builds",
		Args:    nArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return imageList(cmd.OutOrStdout(), cmd.ErrOrStderr(), cache)
		},
	}
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove builds of old recipe versions",
		Args:  nArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return newImageStore(cache, cmd.OutOrStdout()).Prune()
		},
	}
	cmd.AddCommand(build, ls, prune)
	return cmd
}

func newImageStore(cache string, progress io.Writer) *images.Store {
	return &images.Store{CacheDir: cache, Log: slog.Default(), Progress: progress}
}

func imageBuild(ctx context.Context, out io.Writer, cache string, force bool, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("name an image (%s)", strings.Join(images.Names(), ", "))
	}
	known := map[string]bool{}
	for _, n := range images.Names() {
		known[n] = true
	}
	for _, n := range names {
		if !known[n] {
			return fmt.Errorf("%w %q (known: %s)", images.ErrUnknownImage, n, strings.Join(images.Names(), ", "))
		}
	}
	// Ctrl-C cancels ctx; the builder kills build.sh and cleans up.
	store := newImageStore(cache, os.Stderr)
	for _, n := range names {
		img, err := store.Build(ctx, n, force)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\t%s\t%s\t%s\n", img.Name, img.Hash[:12], images.FormatSize(img.SizeBytes), img.Dir)
	}
	return nil
}

func imageList(out, errOut io.Writer, cache string) error {
	rows, err := newImageStore(cache, nil).List()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHASH\tSTATUS\tSIZE\tPATH")
	var details []string
	for _, r := range rows {
		hash, size, path := "-", "-", "-"
		if r.Hash != "" {
			hash = r.Hash[:min(12, len(r.Hash))]
		}
		if r.SizeBytes > 0 {
			size = images.FormatSize(r.SizeBytes)
		}
		if r.Path != "" {
			path = r.Path
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, hash, r.Status, size, path)
		if r.Detail != "" {
			details = append(details, fmt.Sprintf("%s (%s): %s", r.Name, r.Status, r.Detail))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, d := range details {
		fmt.Fprintln(errOut, d)
	}
	return nil
}
