package cua

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deskfarm/deskfarm/atspi"
	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/vmm"
)

// Guest runs programs in the VM as root (the guest agent): a vmm.Farm bound
// to one VM (FarmGuest).
type Guest interface {
	Exec(ctx context.Context, req vmm.ExecRequest) (vmm.ExecResult, error)
	// A11y walks the desktop's accessibility tree in one of package
	// atspi's modes.
	A11y(ctx context.Context, m atspi.Mode) ([]byte, error)
}

// Farm is the part of vmm.Farm that FarmGuest needs.
type Farm interface {
	Exec(ctx context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error)
	DialA11y(ctx context.Context, id string) (net.Conn, error)
}

// FarmGuest is the Guest of one VM of a farm.
type FarmGuest struct {
	Farm Farm
	VM   string
}

// Exec runs req in the VM.
func (g FarmGuest) Exec(ctx context.Context, req vmm.ExecRequest) (vmm.ExecResult, error) {
	return g.Farm.Exec(ctx, g.VM, req)
}

// A11y walks the VM's accessibility tree (atspi.Read).
func (g FarmGuest) A11y(ctx context.Context, m atspi.Mode) ([]byte, error) {
	return atspi.Read(ctx, g.Farm, g.VM, m)
}

// guestCallTimeout bounds the short guest calls (file commands, window
// commands): a qemu-ga exec round trip plus the switch to the user takes
// well under a second, but a TCG guest under load can be slow.
const guestCallTimeout = 60 * time.Second

// session runs programs as the desktop user in its X session (package
// guestx), starting in home.
type session struct {
	g    Guest
	vm   string
	home string
}

// boundGuest is a Guest as guestx's Execer (the VM is already chosen).
type boundGuest struct{ g Guest }

func (b boundGuest) Exec(ctx context.Context, _ string, req vmm.ExecRequest) (vmm.ExecResult, error) {
	return b.g.Exec(ctx, req)
}

// run runs argv as the user. A non-zero exit is not an error here.
func (s session) run(ctx context.Context, stdin []byte, timeout time.Duration, argv ...string) (vmm.ExecResult, error) {
	return guestx.Run(ctx, boundGuest{s.g}, s.vm, guestx.Cmd{Argv: argv, Dir: s.home, Stdin: stdin,
		Env: []string{guestx.SbinPath, "SHELL=/bin/sh"}, Timeout: timeout})
}

// check runs argv as the user and turns a non-zero exit into an error
// carrying its stderr.
func (s session) check(ctx context.Context, stdin []byte, argv ...string) ([]byte, error) {
	res, err := s.run(ctx, stdin, guestCallTimeout, argv...)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 || res.Signal != 0 {
		return nil, &ExitError{Argv: argv, Code: res.ExitCode, Signal: res.Signal, Stderr: strings.TrimSpace(string(res.Stderr))}
	}
	if res.Truncated {
		return nil, fmt.Errorf("%s: output over the guest agent's limit: %w", argv[0], vmm.ErrTooLarge)
	}
	return res.Stdout, nil
}

// ExitError is a guest program that failed. Its text is the program's
// stderr when it wrote one, which is what Cua's clients show.
type ExitError struct {
	Argv   []string
	Code   int
	Signal int
	Stderr string
}

func (e *ExitError) Error() string {
	if e.Stderr != "" {
		return e.Stderr
	}
	if e.Signal != 0 {
		return fmt.Sprintf("%s killed by signal %d", e.Argv[0], e.Signal)
	}
	return fmt.Sprintf("%s exited with status %d", e.Argv[0], e.Code)
}

// Scripts of the file commands; "$1" is the path. They run as the user,
// so permissions and new files' owner are the user's, as under Cua's
// server.
const (
	// list_dir: names of entries that are, or link to, files and
	// directories (Cua keeps p.is_file() or p.is_dir()), NUL-separated.
	listDirScript = `[ -d "$1" ] || { if [ -e "$1" ]; then echo "Not a directory: '$1'" >&2; else echo "No such file or directory: '$1'" >&2; fi; exit 2; }
exec find "$1" -mindepth 1 -maxdepth 1 \( -xtype f -o -xtype d \) -printf '%f\0'`
	// read_bytes: $2 bytes from offset $3 ("" for all).
	readBytesScript = `[ -f "$1" ] || [ ! -e "$1" ] || { echo "Is a directory: '$1'" >&2; exit 2; }
exec dd if="$1" bs=65536 iflag=skip_bytes,count_bytes skip="$3" ${2:+count="$2"} status=none`
	writeScript  = `exec cat >"$1"`
	appendScript = `exec cat >>"$1"`
	// launch: detached, output discarded, the pid printed.
	launchScript = `if [ $# -eq 1 ]; then setsid sh -c "$1" </dev/null >/dev/null 2>&1 &
else setsid "$@" </dev/null >/dev/null 2>&1 & fi
echo $!`
)

func (s session) file(ctx context.Context, o fileOp) (any, error) {
	switch o.kind {
	case fileExists, dirExists:
		flag := "-f"
		if o.kind == dirExists {
			flag = "-d"
		}
		res, err := s.run(ctx, nil, guestCallTimeout, "test", flag, o.path)
		if err != nil {
			return nil, err
		}
		switch res.ExitCode {
		case 0:
			return existsReply{Exists: true}, nil
		case 1:
			return existsReply{Exists: false}, nil
		}
		return nil, &ExitError{Argv: []string{"test"}, Code: res.ExitCode, Signal: res.Signal, Stderr: strings.TrimSpace(string(res.Stderr))}
	case listDir:
		out, err := s.check(ctx, nil, "sh", "-c", listDirScript, "sh", o.path)
		if err != nil {
			return nil, err
		}
		files := []string{}
		for name := range bytes.SplitSeq(out, []byte{0}) {
			if len(name) > 0 {
				files = append(files, string(name))
			}
		}
		return filesReply{Files: files}, nil
	case readText:
		out, err := s.check(ctx, nil, "cat", "--", o.path)
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(out) {
			return nil, fmt.Errorf("'utf-8' codec can't decode %s: not UTF-8 text; use read_bytes", o.path)
		}
		return contentReply{Content: string(out)}, nil
	case readBytes:
		count := ""
		if o.length >= 0 {
			count = strconv.FormatInt(o.length, 10)
		}
		out, err := s.check(ctx, nil, "sh", "-c", readBytesScript, "sh", o.path, count, strconv.FormatInt(o.offset, 10))
		if err != nil {
			return nil, err
		}
		return bytesReply{ContentB64: base64.StdEncoding.EncodeToString(out)}, nil
	case writeText, writeBytes:
		script := writeScript
		if o.append {
			script = appendScript
		}
		if _, err := s.check(ctx, o.data, "sh", "-c", script, "sh", o.path); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	case fileSize:
		out, err := s.check(ctx, nil, "stat", "-L", "-c", "%s", "--", o.path)
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("size of %s: stat printed %q", o.path, out)
		}
		return sizeReply{Size: n}, nil
	case deleteFile, createDir, deleteDir:
		argv := map[fileKind][]string{
			deleteFile: {"rm", "--", o.path},
			createDir:  {"mkdir", "-p", "--", o.path},
			deleteDir:  {"rmdir", "--", o.path},
		}[o.kind]
		if _, err := s.check(ctx, nil, argv...); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	}
	return nil, fmt.Errorf("file command %s not implemented", o.kind)
}

func (s session) shell(ctx context.Context, o shellOp) (any, error) {
	res, err := s.run(ctx, nil, o.timeout, "sh", "-c", o.command)
	if errors.Is(err, vmm.ErrTimeout) && ctx.Err() == nil {
		return commandTimeoutReply{Stderr: fmt.Sprintf("Command timed out after %gs", o.timeout.Seconds()), ReturnCode: -1}, nil
	}
	if err != nil {
		return nil, err
	}
	code := res.ExitCode
	if res.Signal != 0 {
		code = -res.Signal // Python's returncode for a signalled child
	}
	return commandReply{Stdout: string(res.Stdout), Stderr: string(res.Stderr), ReturnCode: code}, nil
}

func (s session) launch(ctx context.Context, o launchOp) (any, error) {
	argv := append([]string{"sh", "-c", launchScript, "sh", o.app}, o.args...)
	out, err := s.check(ctx, nil, argv...)
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return nil, fmt.Errorf("launch %s: no pid in %q", o.app, out)
	}
	return pidReply{PID: pid}, nil
}

// tree walks the desktop's accessibility tree as OSWorld's /accessibility
// does (package atspi), in Cua's shape. A guest without AT-SPI is
// atspi.ErrUnavailable.
func (s session) tree(ctx context.Context) (json.RawMessage, error) {
	out, err := s.g.A11y(ctx, atspi.ModeCua)
	if err != nil {
		return nil, fmt.Errorf("get_accessibility_tree: %w", err)
	}
	if !json.Valid(out) {
		return nil, fmt.Errorf("get_accessibility_tree: the walk answered no JSON (%d bytes)", len(out))
	}
	return out, nil
}
