// Command deskfarm runs a farm of desktop VMs for computer-use agents.
//
//	deskfarm serve [--listen ADDR] [--warm IMAGE | --pools FILE]   serve the HTTP API and viewer
//	deskfarm image build|ls|prune                                 manage guest images
//	deskfarm vm create|ls|rm|reset|exec|get|put                   manage VMs through the API
//	deskfarm episode start|end|ls|pools                           lease VMs from warm pools
//	deskfarm act VM JSON, deskfarm screenshot VM -o FILE          drive a VM's screen
//	deskfarm mcp                                                  serve the farm as MCP tools over stdio
//	deskfarm agent run TASK                                       a computer-use model does TASK on a fresh VM
//	deskfarm completion bash|zsh|fish|powershell                  shell completion
//
// The commands are cobra commands, as in Incus, kubectl and docker: every
// one has --help, flags are parsed the same way everywhere, and completion
// comes with them. The client commands (package internal/cli) talk to a
// server through package client and link none of the server; serve and
// image, which run the farm, live here.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/deskfarm/deskfarm/internal/cli"
	"github.com/spf13/cobra"
)

// Help groups.
const groupServer = "server"

// newRoot builds the whole command tree; env is the client commands' view
// of the process, and stop ends the signal handling of the context the
// root is executed with (serve calls it once it begins shutting down).
func newRoot(env *cli.Env, stop func()) *cobra.Command {
	root := &cobra.Command{
		Use:   "deskfarm",
		Short: "A farm of desktop VMs for computer-use agents",
		Long: `deskfarm runs desktop VMs (libvirt/QEMU) for computer-use agents and serves
them over an HTTP API with live viewers. "deskfarm serve" runs the farm; the
client commands talk to it at --server, else $DESKFARM_SERVER.`,
		SilenceUsage:  true, // an API error is not a usage error
		SilenceErrors: true, // main prints the error once
	}
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.AddGroup(&cobra.Group{ID: groupServer, Title: "Farm commands (run on the host):"})
	serve, image := serveCommand(stop), imageCommand()
	serve.GroupID, image.GroupID = groupServer, groupServer
	root.AddCommand(serve, image)
	cli.AddCommands(root, env)
	// A flag error shows where to find the right ones.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	})
	return root
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})))
	// Ctrl-C cancels the command's context: a client request is canceled
	// (the server then removes what it half made), serve shuts down, a
	// build stops. Serve calls stop once it begins shutting down, so that
	// a second signal kills it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(cli.OSEnv(), stop)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.CommandPath(), err)
		stop()
		os.Exit(1)
	}
}

func logLevel() slog.Level {
	if os.Getenv("DESKFARM_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
