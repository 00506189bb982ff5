package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/spf13/cobra"
)

func actCommand(env *Env) *cobra.Command {
	var out, tool string
	var raw bool
	var conn *conn
	cmd := &cobra.Command{
		Use:   "act [flags] VM JSON",
		Short: "Play agent actions on a VM",
		Long: `Play agent actions on a VM and print what the agent would see.

JSON is a Claude tool call ({"tool":"computer_20251124","input":{...}}), a
bare Claude input (taken as --tool's version), a neutral action
({"kind":...}), or a list of neutral actions.`,
		Example: `  deskfarm act VM '{"action":"left_click","coordinate":[10,20]}'
  deskfarm act -o shot.png VM '{"action":"type","text":"hello\n"}'`,
		Args: nArgs(2, 2, "VM JSON"),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return completeVMs(conn)(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := actBody(args[1], tool)
			if err != nil {
				return err
			}
			c, err := conn.client()
			if err != nil {
				return err
			}
			res, err := c.ActRaw(cmd.Context(), client.VM(args[0]), body)
			if err != nil {
				return err
			}
			if raw {
				return printJSON(env.Stdout, res)
			}
			if res.Text != "" {
				fmt.Fprintln(env.Stdout, res.Text)
			}
			fmt.Fprintf(env.Stderr, "executed %d action(s) in %.0f ms (settled in %.0f ms)\n", res.Executed, res.DurationMS, res.SettleMS)
			if res.Image == nil {
				return nil
			}
			if out == "" {
				fmt.Fprintf(env.Stderr, "image %s %dx%d (use -o FILE to save it)\n", res.Image.MediaType, res.Image.Width, res.Image.Height)
				return nil
			}
			b, err := base64.StdEncoding.DecodeString(res.Image.Data)
			if err != nil {
				return fmt.Errorf("decode image: %w", err)
			}
			return os.WriteFile(out, b, 0o644)
		},
	}
	conn = addServerFlag(env, cmd.Flags())
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the returned image to FILE (default: print only its size)")
	cmd.Flags().StringVar(&tool, "tool", "computer_20251124", "Claude tool version for a bare input")
	cmd.Flags().BoolVar(&raw, "json", false, "print the whole JSON response")
	return cmd
}

// actBody wraps what the user typed into an actions request body.
func actBody(arg, tool string) (json.RawMessage, error) {
	var probe any
	if err := json.Unmarshal([]byte(arg), &probe); err != nil {
		return nil, fmt.Errorf("JSON argument: %w", err)
	}
	switch v := probe.(type) {
	case []any:
		return json.Marshal(map[string]any{"actions": v})
	case map[string]any:
		switch {
		case v["tool"] != nil || v["actions"] != nil || v["action"] != nil && v["kind"] == nil && isObject(v["action"]):
			return json.RawMessage(arg), nil
		case v["kind"] != nil:
			return json.Marshal(map[string]any{"action": v})
		case v["action"] != nil:
			return json.Marshal(map[string]any{"tool": tool, "input": v})
		}
	}
	return nil, errors.New(`JSON must be a Claude input ({"action":"left_click","coordinate":[x,y]}), a tool call ({"tool":...,"input":...}), a neutral action ({"kind":...}) or a list of them`)
}

func isObject(v any) bool { _, ok := v.(map[string]any); return ok }

func screenshotCommand(env *Env) *cobra.Command {
	var out string
	var opts api.ScreenshotOptions
	var conn *conn
	cmd := &cobra.Command{
		Use:   "screenshot [flags] VM",
		Short: "Save a VM's screen to a file",
		Example: `  deskfarm screenshot VM -o shot.png
  deskfarm screenshot --width 1024 --height 640 -o small.jpg VM`,
		Args: nArgs(1, 1, "a VM ID"),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return completeVMs(conn)(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if opts.Format == "" {
				opts.Format = api.FormatPNG
				if strings.HasSuffix(out, ".jpg") || strings.HasSuffix(out, ".jpeg") {
					opts.Format = api.FormatJPEG
				}
			}
			if out == "" {
				ext := map[string]string{api.FormatPNG: "png", api.FormatJPEG: "jpg"}[opts.Format]
				out = "screenshot-" + id + "." + ext
			}
			c, err := conn.client()
			if err != nil {
				return err
			}
			// Into memory first, so a failed request leaves no file.
			var img bytes.Buffer
			if _, err := c.Screenshot(cmd.Context(), client.VM(id), opts, &img); err != nil {
				return fmt.Errorf("screenshot of vm %s: %w", id, err)
			}
			if err := os.WriteFile(out, img.Bytes(), 0o644); err != nil {
				return err
			}
			fmt.Fprintln(env.Stderr, "wrote", out)
			return nil
		},
	}
	conn = addServerFlag(env, cmd.Flags())
	f := cmd.Flags()
	f.StringVarP(&out, "output", "o", "", "output FILE (default: screenshot-VM.png or .jpg)")
	f.StringVar(&opts.Format, "format", "", "png or jpeg (default: from -o's extension, else png)")
	f.IntVar(&opts.Width, "width", 0, "scale to this width (with --height)")
	f.IntVar(&opts.Height, "height", 0, "scale to this height (with --width)")
	f.IntVar(&opts.Quality, "quality", 0, "JPEG quality, 1-100")
	f.BoolVar(&opts.Fresh, "fresh", false, "make sure the screen is current first (after changes not made by actions)")
	return cmd
}
