// Package atspi owns reading a guest desktop's accessibility tree over
// AT-SPI, in the shapes its consumers answer with: OSWorld's XML
// (/accessibility), Cua's JSON tree (get_accessibility_tree) and the
// focused terminal's text (OSWorld's /terminal). One walk serves them all,
// so the OSWorld and Cua routes see the same tree.
//
// The walk runs on the host, in Go (walk.go), and speaks D-Bus to the
// guest's accessibility bus through the VM's accessibility port
// (vmm.Farm.DialA11y), which a small relay in the guest joins to the bus
// (relay.py, started through the guest agent for the walk and gone after
// it). The guest's CPU, slow under TCG, then runs only the bus and the
// applications' answers: an earlier Python walk in the guest spent 30-60 s
// there on one tree (docs/benchmarks.md). The port is split into channels
// (mux.go): the bus, and each application's own D-Bus socket, where it is
// asked past the bus daemon as libatspi's clients ask it. Each
// application's tree comes in one call where it keeps a cache
// (org.a11y.atspi.Cache.GetItems), and the rest is asked many calls at a
// time.
//
// Where the VM layer says how often a VM was reset (a vmm.Farm does), the
// session outlives the walk (keep.go): the relay stays, listening to
// AT-SPI's events, and, for OSWorld's XML, an application that reported
// no change since its last walk is answered from that walk's tree, with
// the objects its events named asked again (web engines, which change
// without events, are walked whole). A reset, a failed walk or two idle minutes
// end the session.
//
// Images without AT-SPI (the desktop image has no at-spi2-core) answer
// ErrUnavailable.
package atspi

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/deskfarm/deskfarm/vmm"
)

// Mode is what a walk answers.
type Mode string

// The modes.
const (
	// ModeOSWorld is the tree as OSWorld's XML.
	ModeOSWorld Mode = "tree"
	// ModeCua is the tree as Cua's JSON: each node {"role", "title",
	// "children"}, with "position" {"x", "y"} and "size" {"width",
	// "height"} when on screen, "value" (its text) and "states".
	ModeCua Mode = "cua"
	// ModeTerminal is {"output": text or null}: the focused
	// gnome-terminal's text, as OSWorld's get_terminal_output.
	ModeTerminal Mode = "terminal"
)

// Timeout bounds one walk, relay start included. 60 s is what OSWorld's
// route has allowed since it was written; it is under Cua's client's
// 120 s websocket timeout, so a Cua client hears why rather than timing
// out. A walk takes seconds (docs/benchmarks.md); an application that
// hangs is cut after callTimeout, not the walk.
const Timeout = 60 * time.Second

// ErrUnavailable: the guest has no AT-SPI accessibility bus.
var ErrUnavailable = errors.New("the guest has no AT-SPI accessibility bus (at-spi2-core)")

// Guest is what a walk needs of the VM layer (a vmm.Farm has it).
type Guest interface {
	Exec(ctx context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error)
	DialA11y(ctx context.Context, id string) (net.Conn, error)
}

//go:embed relay.py
var relayScript []byte

// portPath is the accessibility port in the guest (udev's name for it).
const portPath = "/dev/virtio-ports/org.deskfarm.a11y.0"

// portOpen opens the port as fd 3 as root, then runs "$@".
const portOpen = `i=0; while ! true 3<>"$0" 2>/dev/null && [ $i -lt 50 ]; do i=$((i+1)); sleep 0.1; done; exec 3<>"$0" && exec "$@"`

// Relay exit codes (relay.py).
const (
	exitNoBus   = 3
	exitNoHost  = 4
	maxHelloLen = 1 << 20 // bytes skipped before the hello: an earlier walk's leftovers
)

// Read walks vm's accessibility tree and renders it in mode m. Walks of one
// VM take turns (the port takes one connection). Errors: ErrUnavailable
// without an accessibility bus; vmm.ErrTimeout when the walk did not
// finish within Timeout (or ctx's sooner deadline); the VM layer's.
// Nothing is left running in the guest: the relay ends with the
// connection, and is killed if it does not.
func Read(ctx context.Context, g Guest, vm string, m Mode) ([]byte, error) {
	out, _, err := ReadStats(ctx, g, vm, m, Options{})
	return out, err
}

// Options change what a walk answers.
type Options struct {
	// AppNames renames applications (the desktop's children) by their
	// names, e.g. the osworld image's Chromium as Google Chrome, whose
	// name OSWorld's getters look for (osworld.ChromeAppNames).
	AppNames map[string]string
	// BusOnly asks every application through the bus daemon, never on
	// its own socket: the walk as it was before the port had channels
	// (bench/a11y's side by side).
	BusOnly bool
	// Fresh walks on a session of its own, asking every application
	// afresh, as walks did before sessions were kept (keep.go):
	// bench/a11y's side by side. BusOnly and AskDerived walk fresh too.
	Fresh bool
	// AskDerived asks each object what the walk otherwise derives from
	// its class and its other facts: the attributes and current value of
	// LibreOffice's menu objects (menus.go) and the names of Calc's cells
	// (calc.go). The trees are the same; bench/a11y compares the two.
	AskDerived bool
}

// ReadStats is Read with opts, and with what the walk asked and how long
// each application took, as far as it got on an error too (bench/a11y).
func ReadStats(ctx context.Context, g Guest, vm string, m Mode, opts Options) ([]byte, Stats, error) {
	switch m {
	case ModeOSWorld, ModeCua, ModeTerminal:
	default:
		return nil, Stats{}, fmt.Errorf("accessibility mode %q: accepted modes are tree, cua, terminal", m)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, Timeout, fmt.Errorf("the accessibility walk did not finish within %s: %w", Timeout, vmm.ErrTimeout))
	defer cancel()
	root, st, err := walkVM(ctx, g, vm, m, opts)
	if err != nil {
		if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
			err = c
		}
		return nil, st, fmt.Errorf("accessibility %s of vm %s: %w", m, vm, err)
	}
	for _, app := range root.Children {
		if to, ok := opts.AppNames[app.Name]; ok {
			app.Name = to
		}
	}
	switch m {
	case ModeOSWorld:
		return XML(root), st, nil
	case ModeCua:
		return CuaJSON(root), st, nil
	}
	var text *string
	if t := focusedTerminal(root); t != nil {
		s := strings.TrimRight(t.Text, " \t\n\r\v\f")
		text = &s
	}
	return TerminalJSON(text), st, nil
}

// walkVM walks vm's tree: on the VM's kept session (keep.go) when the
// guest can say when it was reset, else on a session of its own.
func walkVM(ctx context.Context, g Guest, vm string, m Mode, opts Options) (*Node, Stats, error) {
	if rc, ok := g.(resetCounter); ok && !opts.Fresh && !opts.BusOnly && !opts.AskDerived {
		return kept.walk(ctx, g, rc, vm, m)
	}
	// A walk of its own needs the port: a kept session there ends first.
	kept.drop(vm)
	s, err := openSession(ctx, g, vm, nil)
	if err != nil {
		return nil, Stats{}, err
	}
	defer s.close()
	peers := s.peers
	if opts.BusOnly {
		peers = nil
	}
	return walk(ctx, s.bus, m, peers, opts.AskDerived, nil)
}

// authPeer makes a D-Bus connection on an application's socket: the
// EXTERNAL handshake as the relay's user, and no Hello (there is no bus).
// An application that does not answer within callTimeout is not waited
// on.
func authPeer(ctx context.Context, ch io.ReadWriteCloser, uid string) (*dbus.Conn, error) {
	c, err := dbus.NewConn(ch)
	if err != nil {
		ch.Close()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- c.Auth([]dbus.Auth{dbus.AuthExternal(uid)}) }()
	t := time.NewTimer(callTimeout)
	defer t.Stop()
	select {
	case err = <-done:
	case <-t.C:
		err = errCallTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		ch.Close() // ends a handshake still waiting
		c.Close()
		return nil, fmt.Errorf("connect to the application's socket: %w", err)
	}
	return c, nil
}

type relayResult struct {
	res vmm.ExecResult
	err error
}

type helloResult struct {
	uid string
	err error
}

// failure says why the relay ended before its hello.
func (r relayResult) failure() error {
	if r.err != nil {
		return fmt.Errorf("start the relay in the guest: %w", r.err)
	}
	msg := strings.TrimSpace(string(r.res.Stderr))
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	switch r.res.ExitCode {
	case exitNoBus:
		return fmt.Errorf("%w: %s", ErrUnavailable, msg)
	case exitNoHost:
		return fmt.Errorf("the relay found no host on the accessibility port: %s", msg)
	case 127:
		return fmt.Errorf("%w: no python3 in the guest", ErrUnavailable)
	}
	return fmt.Errorf("the relay in the guest exited %d: %s", r.res.ExitCode, msg)
}

// relayFailed is the error of a hello that did not come: the relay's own
// reason when it has ended (it usually has), else err.
func relayFailed(relay chan relayResult, err error) error {
	select {
	case r := <-relay:
		relay <- r
		if r.err == nil && r.res.ExitCode == 0 {
			break // a kept relay, forked after its hello
		}
		return r.failure()
	case <-time.After(2 * time.Second):
	}
	return fmt.Errorf("no hello from the relay in the guest: %w", err)
}

// readHello reads up to the relay's "DESKFARM-A11Y NONCE UID\n", skipping
// what came before it (bytes an earlier relay left in the port), and
// returns the uid the relay runs as. It reads byte by byte: the bus's
// bytes follow and must stay in the stream for the D-Bus client.
func readHello(r io.ByteReader, nonce string) (string, error) {
	want := []byte("DESKFARM-A11Y " + nonce + " ")
	var line []byte
	skipped := 0
	for {
		b, err := r.ReadByte()
		if err != nil {
			return "", err
		}
		if b != '\n' {
			line = append(line, b)
			if len(line) <= len(want)+16 {
				continue
			}
		}
		if b == '\n' && bytes.HasPrefix(line, want) {
			uid := string(line[len(want):])
			if _, err := strconv.ParseUint(uid, 10, 32); err != nil {
				return "", fmt.Errorf("relay hello: uid %q", uid)
			}
			return uid, nil
		}
		skipped += len(line) + 1
		line = line[:0]
		if skipped > maxHelloLen {
			return "", fmt.Errorf("no relay hello in the first %d bytes of the port", maxHelloLen)
		}
	}
}

// byteReader reads one byte per Read: nothing past the hello is taken
// from the stream.
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var p [1]byte
	if _, err := io.ReadFull(b.r, p[:]); err != nil {
		return 0, err
	}
	return p[0], nil
}
