package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/deskfarm/deskfarm/agentloop"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/spf13/cobra"
)

func agentCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a computer-use model on a fresh episode",
	}
	cmd.AddCommand(agentRun(env))
	return cmd
}

func agentRun(env *Env) *cobra.Command {
	var opts agentloop.Options
	var provider, model, baseURL string
	var conn *conn
	cmd := &cobra.Command{
		Use:   "run [flags] TASK",
		Short: "Let Claude (or OpenAI computer use) do TASK on a fresh VM",
		Long: `Lease a fresh VM (an episode), give a computer-use model TASK and the VM's screen,
and play the model's actions until it says it is done or --max-steps turns have
passed. Each step is printed; the live view's link is printed first. The
episode ends at the end (unless --keep).

--provider anthropic (the default) uses the Messages API with Claude's
computer toolset (computer_toolset_20260801, a turn's actions played as one
batch) and $ANTHROPIC_API_KEY ($ANTHROPIC_BASE_URL or --base-url to point
elsewhere); --tool computer_20251124 gives the older single tool instead.
--provider openai uses the Responses API with OpenAI's computer tool and
$OPENAI_API_KEY ($OPENAI_BASE_URL); --tool computer_use_preview gives the
older preview tool. Without --model, each tool gets its model:
` + toolModels(),
		Example: `  deskfarm agent run "Open a terminal and print the date"
  deskfarm agent run --provider openai --max-steps 10 "Open the file manager"
  deskfarm agent run --tool computer_20251124 "Open the file manager"`,
		Args: nArgs(1, 1, "TASK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			opts.Log = env.Stdout
			var res agentloop.Result
			switch provider {
			case "anthropic", "claude":
				if opts.Tool == "" {
					opts.Tool = agentloop.ClaudeTools[0]
				}
				key := env.Getenv("ANTHROPIC_API_KEY")
				if key == "" {
					return errors.New("set ANTHROPIC_API_KEY")
				}
				if baseURL == "" {
					baseURL = env.Getenv("ANTHROPIC_BASE_URL")
				}
				o := []aoption.RequestOption{aoption.WithAPIKey(key)}
				if baseURL != "" {
					o = append(o, aoption.WithBaseURL(baseURL))
				}
				if model == "" {
					model = agentloop.DefaultModel(opts.Tool)
				}
				res, err = agentloop.Claude(cmd.Context(), c, anthropic.NewClient(o...), model, args[0], opts)
			case "openai":
				if opts.Tool == "" {
					opts.Tool = agentloop.OpenAITools[0]
				}
				key := env.Getenv("OPENAI_API_KEY")
				if key == "" {
					return errors.New("set OPENAI_API_KEY")
				}
				if baseURL == "" {
					baseURL = env.Getenv("OPENAI_BASE_URL")
				}
				o := []ooption.RequestOption{ooption.WithAPIKey(key)}
				if baseURL != "" {
					o = append(o, ooption.WithBaseURL(baseURL))
				}
				if model == "" {
					model = agentloop.DefaultModel(opts.Tool)
				}
				res, err = agentloop.OpenAI(cmd.Context(), c, openai.NewClient(o...), model, args[0], opts)
			default:
				return fmt.Errorf("--provider %q: want anthropic or openai", provider)
			}
			if errors.Is(err, agentloop.ErrUnknownTool) {
				return fmt.Errorf("--tool with --provider %s: %w", provider, err)
			}
			if err != nil {
				return err
			}
			if res.Stop != agentloop.StopDone {
				return fmt.Errorf("the task did not finish: stopped (%s) after %d steps", res.Stop, res.Steps)
			}
			return nil
		},
	}
	conn = addServerFlag(env, cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&provider, "provider", "anthropic", "anthropic or openai")
	f.StringVar(&opts.Tool, "tool", "", fmt.Sprintf("computer tool: %s (anthropic), %s (openai); default the first",
		strings.Join(agentloop.ClaudeTools, ", "), strings.Join(agentloop.OpenAITools, ", ")))
	f.StringVar(&model, "model", "", "model (default: the tool's, listed above)")
	f.StringVar(&baseURL, "base-url", "", "the model API's base URL (default $ANTHROPIC_BASE_URL or $OPENAI_BASE_URL, else the provider's)")
	f.StringVar(&opts.Pool, "pool", "", "pool of the episode (may be omitted when the farm has one pool)")
	f.Float64Var(&opts.TTLS, "ttl", 0, "episode lease in seconds (default: the pool's)")
	f.IntVar(&opts.MaxSteps, "max-steps", agentloop.DefaultMaxSteps, "stop after this many model turns")
	f.BoolVar(&opts.KeepEpisode, "keep", false, "leave the episode running at the end (it ends with its lease)")
	f.BoolVar(&opts.Record, "record", false, "record the episode's trajectory (steps, screenshots, video); the last lines say where it is")
	f.BoolVar(&opts.AcknowledgeSafetyChecks, "ack-safety-checks", false, "acknowledge OpenAI's pending safety checks instead of stopping at them")
	return cmd
}

// toolModels lists the model each tool gets by default, a line each.
func toolModels() string {
	var b strings.Builder
	for _, t := range slices.Concat(agentloop.ClaudeTools, agentloop.OpenAITools) {
		fmt.Fprintf(&b, "  %-26s %s\n", t, agentloop.DefaultModel(t))
	}
	return b.String()
}
