package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func vmCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "Create, list, remove and reset VMs; run commands and copy files in them",
		Long: `Manage the farm's VMs through the API of a running "deskfarm serve".

The server is --server, else $DESKFARM_SERVER, else ` + client.DefaultServer + `;
the API token, when the server needs one, is $DESKFARM_TOKEN.`,
	}
	conn := addServerFlag(env, cmd.PersistentFlags())
	cmd.AddCommand(vmCreate(env, conn), vmList(env, conn), vmRemove(env, conn), vmReset(env, conn),
		vmExec(env, conn), vmGet(env, conn), vmPut(env, conn))
	return cmd
}

func vmCreate(env *Env, conn *conn) *cobra.Command {
	var opts api.CreateOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a VM and wait until it is ready",
		Args:  nArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			if env.Interactive(env.Stderr) {
				fmt.Fprintf(env.Stderr, "creating a %s VM (it boots first; this can take a minute)...\n", opts.Image)
			}
			vm, err := c.CreateVM(cmd.Context(), opts)
			if err != nil {
				return fmt.Errorf("create %s vm: %w", opts.Image, err)
			}
			if asJSON {
				return printJSON(env.Stdout, vm)
			}
			return printVMs(env.Stdout, []api.VM{vm})
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Image, "image", "desktop", "guest image name")
	f.IntVar(&opts.MemoryMiB, "memory", 0, "guest RAM in MiB (0: the server's default, 1024)")
	f.IntVar(&opts.VCPUs, "vcpus", 0, "virtual CPUs (0: the server's default, 2)")
	f.IntVar(&opts.Width, "width", 0, "screen width in pixels (0: 1280)")
	f.IntVar(&opts.Height, "height", 0, "screen height in pixels (0: 800)")
	f.BoolVar(&opts.Boot, "boot", false, "boot from scratch even when a saved ready state exists")
	f.BoolVar(&asJSON, "json", false, "print the VM as JSON")
	return cmd
}

func vmList(env *Env, conn *conn) *cobra.Command {
	return listCommand(env, conn, listSpec[api.VM]{
		use: "vms", short: "List VMs, oldest first",
		jsonHelp: `print {"vms":[...]} as JSON`, quietHelp: "print only IDs",
		fetch: func(c *client.Client, ctx context.Context) ([]api.VM, error) {
			vms, err := c.ListVMs(ctx)
			slices.SortFunc(vms, func(a, b api.VM) int { return a.CreatedAt.Compare(b.CreatedAt) })
			return vms, err
		},
		wrap:  func(vms []api.VM) any { return api.VMList{VMs: vms} },
		id:    func(vm api.VM) string { return vm.ID },
		table: printVMs,
	})
}

func vmRemove(env *Env, conn *conn) *cobra.Command {
	return &cobra.Command{
		Use:               "rm ID...",
		Aliases:           []string{"destroy"},
		Short:             "Destroy VMs",
		Args:              nArgs(1, -1, "one or more VM IDs"),
		ValidArgsFunction: completeVMs(conn),
		RunE: func(cmd *cobra.Command, ids []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			return eachID(ids, "remove vm", func(id string) error {
				if err := c.DestroyVM(cmd.Context(), id); err != nil {
					return err
				}
				_, err := fmt.Fprintln(env.Stdout, id)
				return err
			})
		},
	}
}

func vmReset(env *Env, conn *conn) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "reset ID",
		Short:             "Return a VM to its ready snapshot",
		Args:              nArgs(1, 1, "a VM ID"),
		ValidArgsFunction: completeVMs(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			res, err := c.ResetVM(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("reset vm %s: %w", args[0], err)
			}
			if asJSON {
				return printJSON(env.Stdout, res)
			}
			fmt.Fprintf(env.Stdout, "%s reset in %.2fs\n", res.ID, res.ResetSeconds)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func vmExec(env *Env, conn *conn) *cobra.Command {
	var timeout secondsValue
	var envs []string
	var noStdin bool
	cmd := &cobra.Command{
		Use:   "exec [flags] ID [--] ARGV...",
		Short: "Run a program in a VM through its guest agent",
		Long: `Run a program in a VM through its guest agent. Its stdout and stderr
become ours, and its exit code becomes the CLI's. Stdin is sent when it is
not a terminal (-n: never).

Flags come before ID; after ID they are the program's, unless "--" follows
them: "exec ID --env A=1 -- env" and "exec ID ls -l" both work.`,
		Example: `  deskfarm vm exec VM -- uname -a
  echo hi | deskfarm vm exec VM cat`,
		ValidArgsFunction: completeVMs(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv, err := execArgs(cmd.Flags(), args)
			if err != nil {
				return err
			}
			c, err := conn.client()
			if err != nil {
				return err
			}
			req := api.ExecRequest{Argv: argv, Env: envs, TimeoutS: float64(timeout)}
			if !noStdin && !env.Interactive(env.Stdin) {
				in, err := io.ReadAll(io.LimitReader(env.Stdin, api.MaxFileSize+1))
				if err != nil {
					return fmt.Errorf("exec in vm %s: read stdin: %w", id, err)
				}
				if len(in) > api.MaxFileSize {
					return fmt.Errorf("exec in vm %s: stdin exceeds the limit of %d bytes (use -n to send none)", id, api.MaxFileSize)
				}
				if len(in) > 0 {
					req.StdinB64 = base64.StdEncoding.EncodeToString(in)
				}
			}
			res, err := c.Exec(cmd.Context(), client.VM(id), req)
			if err != nil {
				return fmt.Errorf("exec %q in vm %s: %w", argv[0], id, err)
			}
			stdout, err := res.StdoutBytes()
			if err != nil {
				return fmt.Errorf("exec %q in vm %s: %w", argv[0], id, err)
			}
			stderr, err := res.StderrBytes()
			if err != nil {
				return fmt.Errorf("exec %q in vm %s: %w", argv[0], id, err)
			}
			env.Stdout.Write(stdout)
			env.Stderr.Write(stderr)
			if res.Truncated {
				fmt.Fprintf(env.Stderr, "deskfarm: the guest agent truncated the output of %q\n", argv[0])
			}
			code := res.ExitCode
			if res.Signal != 0 {
				code = 128 + res.Signal // as a shell reports it
			}
			if code != 0 {
				env.Exit(code)
			}
			return nil
		},
	}
	f := cmd.Flags()
	// Flags stop at ID, so the program's own flags (ls -l) stay its own.
	f.SetInterspersed(false)
	f.Var(&timeout, "timeout", fmt.Sprintf("bound the run to S seconds, or a duration like 2m (default %s, at most %ds)",
		api.DefaultExecTimeout, api.MaxExecTimeout))
	f.StringArrayVar(&envs, "env", nil, "add K=V to the program's environment (repeatable)")
	f.BoolVarP(&noStdin, "no-stdin", "n", false, "do not send stdin (it is sent when it is not a terminal)")
	return cmd
}

// execArgs splits "ID [FLAGS] -- ARGV..." or "ID ARGV..." (flags before ID
// are parsed already, since parsing stops at ID). Flags between ID and
// "--" are parsed here.
func execArgs(fs *pflag.FlagSet, args []string) (string, []string, error) {
	const want = "want ID -- ARGV..."
	if len(args) == 0 {
		return "", nil, errors.New(want)
	}
	id, rest := args[0], args[1:]
	if id == "--" && len(rest) > 0 { // exec [flags] -- ID ARGV...
		id, rest = rest[0], rest[1:]
	}
	if i := slices.Index(rest, "--"); i >= 0 {
		fs.SetInterspersed(true)
		if err := fs.Parse(rest[:i]); err != nil {
			return "", nil, err
		}
		if fs.NArg() > 0 {
			return "", nil, fmt.Errorf("unexpected %q before --: %s", fs.Args(), want)
		}
		rest = rest[i+1:]
	}
	if len(rest) == 0 {
		return "", nil, errors.New("no program: " + want)
	}
	return id, rest, nil
}

func vmGet(env *Env, conn *conn) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:               "get ID PATH",
		Short:             "Copy a file out of a VM (to stdout, or -o FILE)",
		Args:              nArgs(2, 2, "ID PATH"),
		ValidArgsFunction: completeVMs(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			id, path := args[0], args[1]
			if out == "" || out == "-" {
				_, err := c.ReadFile(cmd.Context(), client.VM(id), path, env.Stdout)
				return err
			}
			file, err := os.Create(out)
			if err != nil {
				return fmt.Errorf("get %s from vm %s: %w", path, id, err)
			}
			_, err = c.ReadFile(cmd.Context(), client.VM(id), path, file)
			if cerr := file.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("get %s from vm %s: %w", path, id, cerr)
			}
			if err != nil {
				os.Remove(out)
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of stdout")
	return cmd
}

func vmPut(env *Env, conn *conn) *cobra.Command {
	var mode string
	cmd := &cobra.Command{
		Use:               "put ID LOCAL PATH",
		Short:             "Copy a local file (or - for stdin) into a VM",
		Args:              nArgs(3, 3, "ID LOCAL PATH"),
		ValidArgsFunction: completeVMs(conn),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := conn.client()
			if err != nil {
				return err
			}
			id, local, path := args[0], args[1], args[2]
			perm := uint32(0o644)
			var body io.Reader
			var size int64
			if local == "-" {
				data, err := io.ReadAll(io.LimitReader(env.Stdin, api.MaxFileSize+1))
				if err != nil {
					return fmt.Errorf("put %s to vm %s: read stdin: %w", path, id, err)
				}
				body, size = bytes.NewReader(data), int64(len(data))
			} else {
				file, err := os.Open(local)
				if err != nil {
					return fmt.Errorf("put %s to vm %s: %w", path, id, err)
				}
				defer file.Close()
				st, err := file.Stat()
				if err != nil {
					return fmt.Errorf("put %s to vm %s: %w", path, id, err)
				}
				if !st.Mode().IsRegular() {
					return fmt.Errorf("put %s to vm %s: %s is not a regular file", path, id, local)
				}
				body, size, perm = file, st.Size(), uint32(st.Mode().Perm())
			}
			if mode != "" {
				m, err := strconv.ParseUint(mode, 8, 32)
				if err != nil || m > 0o7777 {
					return fmt.Errorf("--mode %q: want an octal mode like 0644", mode)
				}
				perm = uint32(m)
			}
			if err := c.WriteFile(cmd.Context(), client.VM(id), path, body, size, perm); err != nil {
				return fmt.Errorf("put %s to vm %s: %w", path, id, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "guest file mode in octal (default: the local file's, 0644 for stdin)")
	return cmd
}

// printVMs prints VMs as a table.
func printVMs(w io.Writer, vms []api.VM) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tIMAGE\tSTATE\tACCEL\tCPUS\tMEMORY\tSCREEN\tBOOT\tRESETS\tAGE")
	for _, vm := range vms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d MiB\t%dx%d\t%.1fs\t%d\t%s\n",
			vm.ID, vm.Image, vm.State, vm.Accel, vm.VCPUs, vm.MemoryMiB, vm.Width, vm.Height,
			vm.BootSeconds, vm.Resets, age(vm.CreatedAt))
	}
	return tw.Flush()
}

// secondsValue is a timeout given as seconds ("30", "2.5") or a Go
// duration ("2m").
type secondsValue float64

func (s *secondsValue) String() string { return strconv.FormatFloat(float64(*s), 'g', -1, 64) }

func (s *secondsValue) Type() string { return "seconds" }

func (s *secondsValue) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		*s = secondsValue(f)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want seconds (30) or a duration (2m)")
	}
	*s = secondsValue(d.Seconds())
	return nil
}
