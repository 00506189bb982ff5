package cli

import (
	"log/slog"

	"github.com/deskfarm/deskfarm/mcpserver"
	"github.com/spf13/cobra"
)

func mcpCommand(env *Env) *cobra.Command {
	var opts mcpserver.Options
	var conn *conn
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the farm's VMs as MCP tools over stdio",
		Long: `Serve the farm as Model Context Protocol tools over standard input and
output, for Claude Desktop, Claude Code and other MCP clients:

  start_episode, end_episode          lease a fresh VM, give it back
  computer                            mouse and keyboard (Claude's computer_20251124 actions), with a screenshot
  screenshot, exec, read_file, write_file

The tools act on the episode this session started last, or on the episode or
vm their arguments name. Episodes the session started end when it closes
(unless --keep-episodes). The API server also serves these tools over HTTP at
/mcp. Logs go to standard error.`,
		Example: `  # Claude Desktop (claude_desktop_config.json) or Claude Code (.mcp.json):
  {"mcpServers":{"deskfarm":{"command":"/usr/local/bin/deskfarm","args":["mcp"],
    "env":{"DESKFARM_SERVER":"http://127.0.0.1:8080"}}}}`,
		Args: nArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			// Standard output is the protocol's: logs go to standard error.
			opts.Logger = slog.New(slog.NewTextHandler(env.Stderr, nil))
			s := mcpserver.New(c, opts)
			return s.Run(cmd.Context(), mcpserver.Stdio(env.Stdin, env.Stdout))
		},
	}
	conn = addServerFlag(env, cmd.Flags())
	cmd.Flags().StringVar(&opts.Pool, "pool", "", "pool start_episode uses when the model names none")
	cmd.Flags().BoolVar(&opts.KeepEpisodes, "keep-episodes", false, "leave the session's episodes running when it ends (they end with their lease)")
	return cmd
}
