// Command deskfarm runs a farm of desktop VMs for computer-use agents.
//
//	deskfarm serve [--listen ADDR]      serve the HTTP API and viewer
//	deskfarm vm create|ls|rm|reset|exec  manage VMs through the API
//	deskfarm image build|ls|prune        manage guest images
package main

import (
	"fmt"
	"log/slog"
	"os"
)

var commands = map[string]func(args []string) error{
	"serve": cmdServe,
	"vm":    cmdVM,
	"image": cmdImage,
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: deskfarm COMMAND [ARGS]

commands:
  serve   serve the HTTP API (deskfarm serve --listen 127.0.0.1:8080)
  vm      create, list, remove, reset VMs and run commands in them
  image   build and list guest images
  act     play agent actions on a VM (deskfarm act VM '{"action":"left_click","coordinate":[10,20]}')
  screenshot  save a VM's screen (deskfarm screenshot VM -o shot.png)
`)
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()})))
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "deskfarm: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := cmd(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "deskfarm %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func logLevel() slog.Level {
	if os.Getenv("DESKFARM_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
