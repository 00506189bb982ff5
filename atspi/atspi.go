// Package atspi owns reading a guest desktop's accessibility tree over
// AT-SPI: a Python reader (a11y.py, pyatspi) that runs in the guest's
// session as the desktop user, in the shapes its consumers answer with:
// OSWorld's XML (/accessibility), Cua's JSON tree (get_accessibility_tree),
// and the focused terminal's text (OSWorld's /terminal). One walk serves
// them all, so the OSWorld and Cua routes see the same tree.
//
// The reader travels on stdin (python3 - MODE): nothing is installed in the
// guest, and a reset, which drops guest files, costs nothing. Images
// without AT-SPI (the desktop image has no python3-pyatspi) exit with
// ExitNoATSPI, which Output turns into ErrUnavailable.
package atspi

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Script is the reader, run as Argv(mode) with Script on stdin.
//
//go:embed a11y.py
var Script []byte

// Mode is what the reader prints.
type Mode string

// The reader's modes.
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

// Argv is the command that runs the reader in mode, with Script on stdin.
func Argv(m Mode) []string { return []string{"python3", "-", string(m)} }

// ExitNoATSPI is the reader's exit status when pyatspi cannot be imported.
const ExitNoATSPI = 3

// Timeout bounds one walk: every node costs D-Bus round trips to its
// application, which is slow in a TCG guest. 60 s is what OSWorld's route
// has allowed since it was written; it is under Cua's client's 120 s
// websocket timeout, so a Cua client hears why rather than timing out.
const Timeout = 60 * time.Second

// ErrUnavailable: the guest has no AT-SPI (no python3 or no pyatspi).
var ErrUnavailable = errors.New("the guest has no AT-SPI accessibility (python3-pyatspi)")

// Output reads one run of the reader: its stdout, ErrUnavailable for
// ExitNoATSPI, or an error carrying the last line of its stderr (the
// exception of a traceback).
func Output(m Mode, exitCode int, stdout, stderr []byte) ([]byte, error) {
	switch exitCode {
	case 0:
		return stdout, nil
	case ExitNoATSPI:
		return nil, fmt.Errorf("accessibility %s: %w", m, ErrUnavailable)
	}
	msg := strings.TrimSpace(string(stderr))
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	return nil, fmt.Errorf("accessibility %s: exit %d: %s", m, exitCode, msg)
}
