// Package cli holds deskfarm's client commands: vm, episode, act,
// screenshot, mcp, agent, trajectories and replay. Each is a thin layer over package client; none links the
// server (a unit test checks that vmm, pool, desk, vnc, web and prometheus
// stay out of this package's dependencies). cmd/deskfarm adds them to the
// root command beside serve and image.
package cli

import (
	"encoding/json"
	"fmt"
	"github.com/deskfarm/deskfarm/api"
	"io"
	"os"
	"time"

	"github.com/deskfarm/deskfarm/client"
	"github.com/spf13/cobra"
)

// Env is the process as the commands see it; tests replace it.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Interactive reports whether f (Stdin or Stderr) is a terminal.
	Interactive func(f any) bool
	// Exit ends the process with a guest program's exit code (vm exec).
	Exit   func(code int)
	Getenv func(string) string
	// TokenFile is the token file read when $DESKFARM_TOKEN_FILE is unset
	// (client.TokenFor). OSEnv's is client.DefaultTokenFile; a test's Env
	// leaves it empty, so that it never sends the host farm's token.
	TokenFile string
}

// OSEnv is the real process.
func OSEnv() *Env {
	return &Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Interactive: isTerminal,
		Exit: os.Exit, Getenv: os.Getenv, TokenFile: client.DefaultTokenFile}
}

// isTerminal reports whether f is an *os.File on a character device.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// AddCommands adds the client commands to root, under their own help
// group.
func AddCommands(root *cobra.Command, env *Env) {
	const group = "client"
	root.AddGroup(&cobra.Group{ID: group, Title: "Client commands (talk to a running server):"})
	for _, c := range []*cobra.Command{vmCommand(env), episodeCommand(env), actCommand(env), screenshotCommand(env), mcpCommand(env), agentCommand(env),
		trajectoriesCommand(env), replayCommand(env), snapshotCommand(env)} {
		c.GroupID = group
		root.AddCommand(c)
	}
}

// conn is the --server flag and the client it makes.
type conn struct {
	env    *Env
	server string
}

// addServerFlag adds --server to flags (persistent ones for a command
// group) and returns where it lands.
func addServerFlag(env *Env, fs interface {
	StringVar(p *string, name, value, usage string)
}) *conn {
	c := &conn{env: env}
	fs.StringVar(&c.server, "server", "", fmt.Sprintf("deskfarm API URL (default $%s, else %s); the token is $%s, else (on loopback) the one in %s",
		client.EnvServer, client.DefaultServer, client.EnvToken, client.DefaultTokenFile))
	return c
}

func (c *conn) client() (*client.Client, error) {
	server := c.server
	if server == "" {
		server = c.env.Getenv(client.EnvServer)
	}
	if server == "" {
		server = client.DefaultServer
	}
	return client.New(server, client.WithToken(client.TokenFor(server, c.env.Getenv, c.env.TokenFile)))
}

// nArgs accepts between min and max positional arguments (max < 0: no
// limit) and names what it wants when it gets something else.
func nArgs(min, max int, want string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || (max >= 0 && len(args) > max) {
			return fmt.Errorf("wrong number of arguments: want %s, got %d (see %s --help)", want, len(args), cmd.CommandPath())
		}
		return nil
	}
}

// completeVMs completes the first argument with the farm's VM ids.
func completeVMs(conn *conn) cobra.CompletionFunc {
	return completeFrom(conn, (*client.Client).ListVMs, func(vm api.VM) (string, string) { return vm.ID, vm.Image + " " + vm.State })
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// age says how long ago t was, coarsely: 45s, 12m, 3h, 2d.
func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
