package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/client"
	"github.com/spf13/cobra"
)

// The vm and episode command groups share their shapes: a list command
// (table, --json, -q), shell completion of IDs from a listing, and a
// command that acts on each of several IDs and reports every failure.

// listSpec describes one list command.
type listSpec[T any] struct {
	use, short, jsonHelp, quietHelp string
	fetch                           func(*client.Client, context.Context) ([]T, error) // a method expression: (*client.Client).ListVMs
	wrap                            func([]T) any                                      // the JSON document: {"vms":[...]} and so on
	id                              func(T) string
	table                           func(io.Writer, []T) error
}

func listCommand[T any](env *Env, conn *conn, s listSpec[T]) *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   s.short,
		Args:    nArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			items, err := s.fetch(c, cmd.Context())
			if err != nil {
				return fmt.Errorf("list %s: %w", s.use, err)
			}
			switch {
			case asJSON:
				if items == nil {
					items = []T{}
				}
				return printJSON(env.Stdout, s.wrap(items))
			case quiet:
				for _, it := range items {
					fmt.Fprintln(env.Stdout, s.id(it))
				}
				return nil
			}
			return s.table(env.Stdout, items)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, s.jsonHelp)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, s.quietHelp)
	return cmd
}

// completeFrom completes the first argument from a listing: name and
// description of each item whose name starts with what was typed. A farm
// that does not answer within 2 s completes nothing.
func completeFrom[T any](conn *conn, fetch func(*client.Client, context.Context) ([]T, error), describe func(T) (name, desc string)) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		c, err := conn.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
		defer cancel()
		items, err := fetch(c, ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, it := range items {
			if name, desc := describe(it); strings.HasPrefix(name, toComplete) {
				out = append(out, cobra.CompletionWithDesc(name, desc))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// eachID runs do for every ID, going on after a failure, and returns every
// failure, each naming what failed and the ID.
func eachID(ids []string, what string, do func(id string) error) error {
	var errs []error
	for _, id := range ids {
		if err := do(id); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", what, id, err))
		}
	}
	return errors.Join(errs...)
}
