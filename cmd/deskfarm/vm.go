package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// vmIO is the CLI's view of the process, swapped out by tests.
type vmIO struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// interactive reports whether f is a terminal.
	interactive func(f any) bool
	exit        func(code int)
	getenv      func(string) string
}

var vmio = vmIO{
	stdin:       os.Stdin,
	stdout:      os.Stdout,
	stderr:      os.Stderr,
	interactive: isTerminal,
	exit:        os.Exit,
	getenv:      os.Getenv,
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

type vmCommand struct {
	run   func(ctx context.Context, args []string) error
	usage string
}

var vmCommands map[string]vmCommand

func init() {
	// Assigned in init: vmHelp refers to the map.
	vmCommands = map[string]vmCommand{
		"create": {vmCreate, "create [--image desktop] [--memory MiB] [--vcpus N] [--width W --height H] [--json]"},
		"ls":     {vmList, "ls [--json | -q]"},
		"rm":     {vmRemove, "rm ID..."},
		"reset":  {vmReset, "reset [--json] ID"},
		"exec":   {vmExec, "exec [--timeout S] [--env K=V]... [-n] ID -- ARGV..."},
		"get":    {vmGet, "get ID PATH [-o FILE]"},
		"put":    {vmPut, "put [--mode 0644] ID LOCAL PATH"},
		"help":   {vmHelp, "help"},
	}
}

func vmHelp(context.Context, []string) error {
	fmt.Fprint(vmio.stderr, `usage: deskfarm vm COMMAND [ARGS]

commands (all take --server URL, default $DESKFARM_SERVER or `+defaultServer+`;
the API token comes from $DESKFARM_TOKEN):
`)
	names := make([]string, 0, len(vmCommands))
	for name := range vmCommands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(vmio.stderr, "  deskfarm vm %s\n", vmCommands[name].usage)
	}
	return nil
}

func cmdVM(args []string) error {
	if len(args) == 0 {
		vmHelp(context.Background(), nil)
		return errors.New("missing command")
	}
	name := args[0]
	if name == "-h" || name == "--help" {
		name = "help"
	}
	cmd, ok := vmCommands[name]
	if !ok {
		vmHelp(context.Background(), nil)
		return fmt.Errorf("unknown command %q", args[0])
	}
	// Ctrl-C cancels the request; the server then stops what it started
	// (a canceled create removes its half-made VM).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd.run(ctx, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// vmFlags is a subcommand's flag set with the flags all of them share.
type vmFlags struct {
	*flag.FlagSet
	server string
}

func newVMFlags(name string) *vmFlags {
	f := &vmFlags{FlagSet: flag.NewFlagSet("vm "+name, flag.ContinueOnError)}
	f.SetOutput(vmio.stderr)
	f.Usage = func() {
		fmt.Fprintf(vmio.stderr, "usage: deskfarm vm %s\n\nflags:\n", vmCommands[name].usage)
		f.PrintDefaults()
	}
	server := vmio.getenv("DESKFARM_SERVER")
	if server == "" {
		server = defaultServer
	}
	f.StringVar(&f.server, "server", server, "deskfarm API `URL` (also $DESKFARM_SERVER)")
	return f
}

func (f *vmFlags) client() (*apiClient, error) {
	return newAPIClient(f.server, vmio.getenv("DESKFARM_TOKEN"))
}

// parse parses flags anywhere among the arguments (vm get ID PATH -o FILE)
// and returns the positional ones, which must number between min and max
// (max < 0: no limit). Everything after "--" is positional.
func (f *vmFlags) parse(args []string, min, max int) ([]string, error) {
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			return nil, err
		}
		rest := f.Args()
		if len(rest) == 0 {
			break
		}
		// Parse stops at a positional argument, or drops "--" and stops after it.
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < min || (max >= 0 && len(pos) > max) {
		f.Usage()
		return nil, fmt.Errorf("vm %s: wrong number of arguments", strings.TrimPrefix(f.Name(), "vm "))
	}
	return pos, nil
}

func vmCreate(ctx context.Context, args []string) error {
	f := newVMFlags("create")
	var opts vmm.CreateOptions
	f.StringVar(&opts.Image, "image", "desktop", "guest image `name`")
	f.IntVar(&opts.MemoryMiB, "memory", 0, fmt.Sprintf("guest RAM in `MiB` (default %d)", vmm.DefaultMemoryMiB))
	f.IntVar(&opts.VCPUs, "vcpus", 0, fmt.Sprintf("virtual `CPUs` (default %d)", vmm.DefaultVCPUs))
	f.IntVar(&opts.Width, "width", 0, fmt.Sprintf("screen width in `pixels` (default %d)", vmm.DefaultWidth))
	f.IntVar(&opts.Height, "height", 0, fmt.Sprintf("screen height in `pixels` (default %d)", vmm.DefaultHeight))
	asJSON := f.Bool("json", false, "print the VM as JSON")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	if vmio.interactive(vmio.stderr) {
		fmt.Fprintf(vmio.stderr, "creating a %s VM (it boots first; this can take a minute)...\n", opts.Image)
	}
	vm, err := c.createVM(ctx, opts)
	if err != nil {
		return fmt.Errorf("create %s vm: %w", opts.Image, err)
	}
	if *asJSON {
		return printJSON(vm)
	}
	return printVMs([]vmm.VM{vm})
}

func vmList(ctx context.Context, args []string) error {
	f := newVMFlags("ls")
	asJSON := f.Bool("json", false, `print {"vms":[...]} as JSON`)
	quiet := f.Bool("q", false, "print only IDs")
	if _, err := f.parse(args, 0, 0); err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	vms, err := c.listVMs(ctx)
	if err != nil {
		return fmt.Errorf("list vms: %w", err)
	}
	slices.SortFunc(vms, func(a, b vmm.VM) int { return a.CreatedAt.Compare(b.CreatedAt) })
	switch {
	case *asJSON:
		if vms == nil {
			vms = []vmm.VM{}
		}
		return printJSON(web.VMList{VMs: vms})
	case *quiet:
		for _, vm := range vms {
			fmt.Fprintln(vmio.stdout, vm.ID)
		}
		return nil
	}
	return printVMs(vms)
}

func vmRemove(ctx context.Context, args []string) error {
	f := newVMFlags("rm")
	ids, err := f.parse(args, 1, -1)
	if err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := c.deleteVM(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("remove vm %s: %w", id, err))
			continue
		}
		fmt.Fprintln(vmio.stdout, id)
	}
	return errors.Join(errs...)
}

func vmReset(ctx context.Context, args []string) error {
	f := newVMFlags("reset")
	asJSON := f.Bool("json", false, "print the result as JSON")
	pos, err := f.parse(args, 1, 1)
	if err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	res, err := c.resetVM(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("reset vm %s: %w", pos[0], err)
	}
	if *asJSON {
		return printJSON(res)
	}
	fmt.Fprintf(vmio.stdout, "%s reset in %.2fs\n", res.ID, res.ResetSeconds)
	return nil
}

func vmExec(ctx context.Context, args []string) error {
	f := newVMFlags("exec")
	var timeout secondsFlag
	var env stringsFlag
	f.Var(&timeout, "timeout", fmt.Sprintf("bound the run to `S` seconds (or a duration like 2m; default %s, at most %ds)",
		vmm.DefaultExecTimeout, web.MaxExecTimeout))
	f.Var(&env, "env", "add `K=V` to the program's environment (repeatable)")
	noStdin := f.Bool("n", false, "do not send stdin (it is sent when it is not a terminal)")
	id, argv, err := f.parseExec(args)
	if err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	req := web.ExecRequest{Argv: argv, Env: env, TimeoutS: float64(timeout)}
	if !*noStdin && !vmio.interactive(vmio.stdin) {
		in, err := io.ReadAll(io.LimitReader(vmio.stdin, vmm.MaxFileSize+1))
		if err != nil {
			return fmt.Errorf("exec in vm %s: read stdin: %w", id, err)
		}
		if len(in) > vmm.MaxFileSize {
			return fmt.Errorf("exec in vm %s: stdin exceeds the limit of %d bytes (use -n to send none)", id, vmm.MaxFileSize)
		}
		if len(in) > 0 {
			req.StdinB64 = base64.StdEncoding.EncodeToString(in)
		}
	}
	res, err := c.exec(ctx, id, req)
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
	vmio.stdout.Write(stdout)
	vmio.stderr.Write(stderr)
	if res.Truncated {
		fmt.Fprintf(vmio.stderr, "deskfarm: the guest agent truncated the output of %q\n", argv[0])
	}
	code := res.ExitCode
	if res.Signal != 0 {
		code = 128 + res.Signal // as a shell reports it
	}
	if code != 0 {
		vmio.exit(code)
	}
	return nil
}

// parseExec parses "exec [flags] ID -- ARGV..." and also "exec [flags] ID
// ARGV..." (then flags end at ID, so ARGV may hold its own).
func (f *vmFlags) parseExec(args []string) (string, []string, error) {
	var id string
	var argv []string
	if i := slices.Index(args, "--"); i >= 0 {
		pos, err := f.parse(args[:i], 1, 1)
		if err != nil {
			return "", nil, err
		}
		id, argv = pos[0], args[i+1:]
	} else {
		if err := f.Parse(args); err != nil {
			return "", nil, err
		}
		if f.NArg() > 0 {
			id, argv = f.Arg(0), f.Args()[1:]
		}
	}
	if id == "" || len(argv) == 0 {
		f.Usage()
		return "", nil, errors.New("vm exec: want ID -- ARGV...")
	}
	return id, argv, nil
}

func vmGet(ctx context.Context, args []string) error {
	f := newVMFlags("get")
	out := f.String("o", "", "write to `FILE` instead of stdout")
	pos, err := f.parse(args, 2, 2)
	if err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	id, path := pos[0], pos[1]
	if *out == "" || *out == "-" {
		_, err := c.readFile(ctx, id, path, vmio.stdout)
		return err
	}
	file, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("get %s from vm %s: %w", path, id, err)
	}
	_, err = c.readFile(ctx, id, path, file)
	if cerr := file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("get %s from vm %s: %w", path, id, cerr)
	}
	if err != nil {
		os.Remove(*out)
		return err
	}
	return nil
}

func vmPut(ctx context.Context, args []string) error {
	f := newVMFlags("put")
	mode := f.String("mode", "", "guest file mode in octal (default: the local file's, 0644 for stdin)")
	pos, err := f.parse(args, 3, 3)
	if err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	id, local, path := pos[0], pos[1], pos[2]
	perm := uint32(0o644)
	var body io.Reader
	var size int64
	if local == "-" {
		data, err := io.ReadAll(io.LimitReader(vmio.stdin, vmm.MaxFileSize+1))
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
	if *mode != "" {
		m, err := strconv.ParseUint(*mode, 8, 32)
		if err != nil || m > 0o7777 {
			return fmt.Errorf("--mode %q: want an octal mode like 0644", *mode)
		}
		perm = uint32(m)
	}
	if err := c.writeFile(ctx, id, path, body, size, perm); err != nil {
		return fmt.Errorf("put %s to vm %s: %w", path, id, err)
	}
	return nil
}

// printVMs prints VMs as a table.
func printVMs(vms []vmm.VM) error {
	tw := tabwriter.NewWriter(vmio.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tIMAGE\tSTATE\tACCEL\tCPUS\tMEMORY\tSCREEN\tBOOT\tRESETS\tAGE")
	for _, vm := range vms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d MiB\t%dx%d\t%.1fs\t%d\t%s\n",
			vm.ID, vm.Image, vm.State, vm.Accel, vm.VCPUs, vm.MemoryMiB, vm.Width, vm.Height,
			vm.BootSeconds, vm.Resets, age(vm.CreatedAt))
	}
	return tw.Flush()
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

func printJSON(v any) error {
	enc := json.NewEncoder(vmio.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// secondsFlag is a timeout given as seconds ("30", "2.5") or a Go
// duration ("2m").
type secondsFlag float64

func (s *secondsFlag) String() string { return strconv.FormatFloat(float64(*s), 'g', -1, 64) }

func (s *secondsFlag) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		*s = secondsFlag(f)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want seconds (30) or a duration (2m)")
	}
	*s = secondsFlag(d.Seconds())
	return nil
}

// stringsFlag collects a repeated flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}
