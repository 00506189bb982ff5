package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/deskfarm/deskfarm/images"
)

const imageUsage = `usage:
  deskfarm image build [--force] [--cache DIR] NAME...   build images (cached unless --force)
  deskfarm image ls [--cache DIR]                        list recipes and cached builds
  deskfarm image prune [--cache DIR]                     remove builds of old recipe versions

images: %s
cache:  %s (--cache)
`

// cmdImage implements "deskfarm image build|ls|prune".
func cmdImage(args []string) error {
	if len(args) == 0 {
		fmt.Fprintf(os.Stderr, imageUsage, strings.Join(images.Names(), ", "), images.DefaultCacheDir)
		return errors.New("missing subcommand (build, ls, prune)")
	}
	var err error
	switch args[0] {
	case "build":
		err = imageBuild(args[1:])
	case "ls", "list":
		err = imageList(args[1:])
	case "prune":
		err = imagePrune(args[1:])
	case "help", "-h", "-help", "--help":
		fmt.Fprintf(os.Stdout, imageUsage, strings.Join(images.Names(), ", "), images.DefaultCacheDir)
		return nil
	default:
		return fmt.Errorf("unknown subcommand %q (want build, ls, prune)", args[0])
	}
	if errors.Is(err, flag.ErrHelp) {
		return nil // the flag set printed the usage
	}
	return err
}

// imageFlags is a flag set with the options every image subcommand has.
func imageFlags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("deskfarm image "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), imageUsage, strings.Join(images.Names(), ", "), images.DefaultCacheDir)
	}
	cache := fs.String("cache", images.DefaultCacheDir, "cache directory")
	return fs, cache
}

// parseInterspersed parses fs allowing flags after positional arguments
// ("build desktop --force") and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newImageStore(cache string, progress io.Writer) *images.Store {
	return &images.Store{CacheDir: cache, Log: slog.Default(), Progress: progress}
}

func imageBuild(args []string) error {
	fs, cache := imageFlags("build")
	force := fs.Bool("force", false, "rebuild even if the current recipe is cached")
	names, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("build: name an image (%s)", strings.Join(images.Names(), ", "))
	}
	known := map[string]bool{}
	for _, n := range images.Names() {
		known[n] = true
	}
	for _, n := range names {
		if !known[n] {
			return fmt.Errorf("build: %w %q (known: %s)", images.ErrUnknownImage, n, strings.Join(images.Names(), ", "))
		}
	}
	// Ctrl-C stops the build; the builder kills build.sh and cleans up.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store := newImageStore(*cache, os.Stderr)
	for _, n := range names {
		img, err := store.Build(ctx, n, *force)
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%s\t%s\t%s\n", img.Name, img.Hash[:12], images.FormatSize(img.SizeBytes), img.Dir)
	}
	return nil
}

func imageList(args []string) error {
	fs, cache := imageFlags("ls")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	rows, err := newImageStore(*cache, nil).List()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
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
		fmt.Fprintln(os.Stderr, d)
	}
	return nil
}

func imagePrune(args []string) error {
	fs, cache := imageFlags("prune")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	return newImageStore(*cache, os.Stdout).Prune()
}
