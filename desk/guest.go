package desk

import (
	"context"
	"fmt"
	"image"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
)

// GuestExec is the optional part of a Farm that reaches inside the guest:
// vmm.Farm's Exec. With it, a desk's executors get an player.GuestInput
// (non-ASCII text, horizontal scroll, back/forward, the clipboard), played
// in the guest's desktop session through package guestx.
type GuestExec interface {
	Exec(ctx context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error)
}

// CPUTimer is the optional part of a Farm that reports a VM's cumulative
// vCPU time (vmm.Manager.CPUTime). With it, a desk's settles wait for the
// guest to go idle as well as its screen (player.GuestActivity).
type CPUTimer interface {
	CPUTime(ctx context.Context, id string) (time.Duration, error)
}

// GuestIdle is the vCPU utilisation (vCPU seconds per second, summed over
// vCPUs) at or below which a desk's settle counts the guest as idle.
//
// Measured on the desktop image under TCG (2 vCPUs, 1 GiB; the 2-core build
// host at load average 8-12), 2026-11-30, sampling vmm.Manager.CPUTime every
// 250 ms: an idle desktop read 0.00-0.08, once 0.28 just after a launch
// (libvirt's cpuTime is the QEMU process's utime+stime in 10 ms ticks, so a
// 250 ms window moves in steps of 0.04); while mousepad started it read
// 0.32-1.00, 0.6-1.0 for most of its ~10 s start-up. 0.25 (
// player.DefaultGuestIdle) sits between; a busy window costs one more
// settle round, so an idle guest's occasional tick is cheap.
const GuestIdle = 0.25

// guestTimeout bounds one guest command of the session input.
const guestTimeout = 30 * time.Second

// guestInput is a desk's player.GuestInput: xdotool and xclip run as the
// desktop user in the guest's X session (guestx).
type guestInput struct {
	ex  GuestExec
	vm  string
	log *slog.Logger
	// disp is the VM's display, whose input the guest input must not
	// overtake (fence).
	disp player.Display
}

// Fence timing (guestInput.fence).
const (
	fenceQuiet = 200 * time.Millisecond
	fenceMax   = 5 * time.Second
)

// fence waits until input sent over the display has reached the guest's
// applications, before input is delivered inside the guest: XTEST events
// from xdotool go straight to the X server, while VNC keys queue in QEMU's
// PS/2 keyboard and the guest kernel and reach the X server at the guest's
// pace. Without it, in bench/settle (2026-11-30, idle host), text pasted
// right after 160 ASCII characters typed over VNC with no settle landed in
// the middle of them, and the paste's Shift turned later keys upper-case
// ("foX", "BRown"). There is no way to ask QEMU for its queue, so the fence
// is the screen going quiet (the typed text drawn), bounded by fenceMax.
func (g *guestInput) fence(ctx context.Context) {
	if g.disp == nil {
		return
	}
	if _, err := g.disp.Settle(ctx, fenceQuiet, fenceMax); err != nil {
		g.log.Debug("fence before guest input", "vm", g.vm, "op", "guest-input", "err", err)
	}
}

var _ player.GuestInput = (*guestInput)(nil)

// run runs argv in the session and fails on a non-zero exit.
func (g *guestInput) run(ctx context.Context, c guestx.Cmd) ([]byte, error) {
	if c.Timeout == 0 {
		c.Timeout = guestTimeout
	}
	start := time.Now()
	out, err := guestx.Output(ctx, g.ex, g.vm, c)
	g.log.Debug("guest input", "vm", g.vm, "op", "guest-input", "argv", c.Argv, "duration", time.Since(start).Round(time.Millisecond), "err", err)
	return out, err
}

// pasteScript types stdin by pasting it: each line is put in the CLIPBOARD
// and PRIMARY selections and pasted with Shift+Insert (GTK and Qt text
// widgets, browsers and LibreOffice paste CLIPBOARD on it, VTE terminals
// such as lxterminal PRIMARY), and each newline is a Return key, so that a
// terminal runs a command as if it were typed (bash's bracketed paste would
// hold a pasted newline). The clipboard the user had is put back afterwards.
//
// Why not xdotool type: on the desktop image (xdotool 3.20160805, mousepad)
// it drops characters outside the keymap: typing "é日ü本✓x" with --delay 150
// gave "éü本x", and at the demo's 12 ms "Grüße, café" gave "Gre, caf"
// (2026-11-30); xdotool rebinds one spare keycode per character and the
// application reads the key before the new mapping (jordansissel/xdotool#97,
// #154). Pasting gave the text byte for byte in mousepad and lxterminal.
//
// The application fetches the selection asynchronously after the key, and
// keys sent after the paste (a Return here, or the agent's next action over
// VNC) must not overtake it. xclip -verbose logs each selection request it
// serves ("Waiting for selection request N of ..." after N-1 served), so the
// script waits for the first request to be served, then pasteGrace for the
// data request that follows the TARGETS one (GTK asks for TARGETS, then
// UTF8_STRING; measured in mousepad), at most pasteWait in all.
//
// The waits are bounded by the clock (bash's EPOCHREALTIME, read without a
// process), not by a count of polls: each poll forks a sleep, and in a busy
// guest under TCG a poll took ~130 ms instead of 20 ms, so the 250-poll
// bound of pasteWait's first version stretched to 33 s when an application
// fetched nothing, and the guest command ran past guestTimeout. Typing
// "abc ünï def\nghi ✓ jkl\n" into lxterminal through the actions route
// with the guest's vCPUs busy (shell loops, nice 0 or 19; host load average
// ~8; 2026-11-30), 3 runs of 5 rounds each failed within 2 rounds with
// "timed out after 30s"; one traced paste spent 33 s in 252 polls. A wait
// that runs out is reported on stdout, which TypeText logs.
//
// A paste key that no application acts on is pressed again, up to
// pasteRetries times. In the same runs, with the wait raised to 30 s as a
// probe, 2 of 10 rounds had a line whose paste key brought no selection
// request at all within the 30 s (always the second line, pasted right
// after the first line's Return), so the line was lost; every other line
// was fetched in time (those rounds took 6-12 s for two pasted lines and an
// ASCII line). With the retry, 8 rounds under the same load came out byte
// for byte, the second key taking effect where the first had not (2 of 16
// lines). An application that is only slow would get the line twice; none
// was seen.
const pasteScript = `ms() { ms=${EPOCHREALTIME/./}; ms=${ms%???}; } # wall clock in ms, in $ms
d=$(mktemp -d) && cat >"$d/in" || exit 1
xclip -selection clipboard -o -t UTF8_STRING >"$d/old" 2>/dev/null || rm -f "$d/old"
n=$(wc -l <"$d/in")
i=0
serve() { # serve $d/line in selection $1, logging to $d/$1
	xclip -verbose -selection "$1" -loops 1000 -i "$d/line" >"$d/$1" 2>&1 &
}
served() { # has selection $1 served $2-1 requests? (shell builtins only: no process per poll)
	while IFS= read -r l; do
		case "$l" in *"request $2 of"*) return 0 ;; esac
	done <"$d/$1"
	return 1
}
while IFS= read -r line || [ -n "$line" ]; do
	if [ -n "$line" ]; then
		printf %s "$line" >"$d/line"
		serve clipboard; c=$!
		serve primary; p=$!
		ms; end=$((ms + ` + pasteTake + `))
		until served clipboard 1 && served primary 1; do
			ms; [ "$ms" -gt "$end" ] && { kill $c $p; echo "xclip did not take the selections within ` + pasteTake + ` ms" >&2; exit 1; }
			sleep 0.02
		done
		tries=1
		while :; do
			xdotool key --clearmodifiers shift+Insert || { kill $c $p; exit 1; }
			ms; end=$((ms + ` + pasteWait + `))
			until served clipboard 2 || served primary 2; do
				ms; [ "$ms" -gt "$end" ] && break
				sleep 0.02
			done
			if served clipboard 2 || served primary 2; then break; fi
			echo "line $((i + 1)): no selection request within ` + pasteWait + ` ms of paste key $tries"
			[ "$tries" -gt ` + pasteRetries + ` ] && break
			tries=$((tries + 1))
		done
		sleep ` + pasteGrace + `
		kill $c $p 2>/dev/null
		wait $c $p 2>/dev/null
	fi
	i=$((i + 1))
	if [ "$i" -le "$n" ]; then xdotool key --clearmodifiers Return || exit 1; fi
done <"$d/in"
if [ -f "$d/old" ]; then xclip -selection clipboard -i "$d/old" >/dev/null 2>&1; fi
rm -rf "$d"
exit 0`

// Paste pacing (pasteScript): pasteTake is how long xclip may take to own
// the selections and pasteWait how long the application may take to ask
// for them, in ms; pasteGrace is in seconds.
const (
	pasteTake    = "15000"
	pasteWait    = "5000"
	pasteRetries = "2"
	pasteGrace   = "0.2"
)

// pasteTimeout bounds a paste of text with lines lines: every line may use
// the whole of pasteTake and pasteWait for each of its paste keys, and
// starts a few processes.
func pasteTimeout(lines int) time.Duration {
	return guestTimeout + time.Duration(lines)*40*time.Second
}

// TypeText types text by pasting it in the guest's session (pasteScript,
// run by bash for its clock). The text travels on stdin, byte for byte,
// without quoting.
func (g *guestInput) TypeText(ctx context.Context, text string) error {
	g.fence(ctx)
	out, err := g.run(ctx, guestx.Cmd{Argv: []string{"bash", "-c", pasteScript}, Stdin: []byte(text),
		Timeout: pasteTimeout(strings.Count(text, "\n") + 1)})
	if note := strings.TrimSpace(string(out)); note != "" {
		g.log.Warn("paste key without effect", "vm", g.vm, "op", "guest-input", "note", note)
	}
	return err
}

// Button clicks X button b count times at (x, y).
func (g *guestInput) Button(ctx context.Context, b, x, y, count int) error {
	if count < 1 {
		count = 1
	}
	g.fence(ctx)
	_, err := g.run(ctx, guestx.Cmd{Argv: []string{"xdotool", "mousemove", strconv.Itoa(x), strconv.Itoa(y),
		"click", "--repeat", strconv.Itoa(count), "--delay", "30", strconv.Itoa(b)}})
	return err
}

// ClipboardGet reads the CLIPBOARD selection as UTF-8; "" when nothing owns
// it or it holds no text.
func (g *guestInput) ClipboardGet(ctx context.Context) (string, error) {
	g.fence(ctx) // a ctrl+c just sent over VNC must have landed
	// xclip exits 1 when the selection is empty or has no UTF8_STRING
	// target; tell that apart from a broken session with the owner check.
	out, err := g.run(ctx, guestx.Cmd{Shell: `xclip -selection clipboard -o -t UTF8_STRING 2>/dev/null && exit 0
t=$(xclip -selection clipboard -o -t TARGETS 2>/dev/null) || exit 0
case "$t" in *UTF8_STRING*|*STRING*) exit 1;; esac`})
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// ClipboardSet makes xclip own the CLIPBOARD selection with text. xclip
// stays in the background to serve it; its output goes to /dev/null so that
// the guest agent's exec does not wait for it.
func (g *guestInput) ClipboardSet(ctx context.Context, text string) error {
	_, err := g.run(ctx, guestx.Cmd{Shell: `xclip -selection clipboard -i >/dev/null 2>&1`, Stdin: []byte(text)})
	if err != nil {
		return fmt.Errorf("set clipboard: %w", err)
	}
	return nil
}

// pointer asks the session where the pointer is, in native pixels: the
// guest knows it even before this desk has sent a pointer event.
func (g *guestInput) pointer(ctx context.Context) (image.Point, error) {
	out, err := g.run(ctx, guestx.Cmd{Argv: []string{"xdotool", "getmouselocation", "--shell"}})
	if err != nil {
		return image.Point{}, err
	}
	return parseMouseLocation(string(out))
}

// parseMouseLocation reads xdotool getmouselocation --shell's output
// (X=, Y=, SCREEN=, WINDOW= lines; xdotool 3.20160805).
func parseMouseLocation(out string) (image.Point, error) {
	var p image.Point
	var seen int
	for _, line := range strings.Fields(out) {
		k, v, ok := strings.Cut(line, "=")
		if !ok || (k != "X" && k != "Y") {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return image.Point{}, fmt.Errorf("pointer location: xdotool printed %q", line)
		}
		if k == "X" {
			p.X, seen = n, seen|1
		} else {
			p.Y, seen = n, seen|2
		}
	}
	if seen != 3 {
		return image.Point{}, fmt.Errorf("pointer location: no X and Y in xdotool's %q", out)
	}
	return p, nil
}

// DiskCounter is the optional part of a Farm that counts a VM's disk
// requests (vmm.Manager.DiskRequests). With it, a desk's settle also counts
// a guest waiting on its disk as busy.
type DiskCounter interface {
	DiskRequests(ctx context.Context, id string) (int64, error)
}

// diskRequestWeight is the vCPU time one disk request counts as in a
// settle's activity sample. A program starting after a reset reads its
// binaries and libraries from a cold page cache, and while it waits for
// them its vCPUs are idle: in bench/settle (docs/benchmarks.md) vCPU time
// alone let 2 of 3 terminal launches settle in ~0.5 s where the third
// waited 4.8 s. At 40 ms, 1 request in a 150 ms quiet window reads as 0.27,
// over GuestIdle; the idle desktop measured 0.5 requests/s, so an idle
// window rarely counts as busy, and then costs one more round.
const diskRequestWeight = 40 * time.Millisecond

// guestActivity is a desk's player.GuestActivity: the VM's vCPU time,
// plus its disk requests at diskRequestWeight each when the farm counts
// them.
type guestActivity struct {
	t    CPUTimer
	disk DiskCounter // nil: vCPU time alone
	vm   string
}

// CPUTime returns the VM's cumulative activity as vCPU time.
func (a guestActivity) CPUTime(ctx context.Context) (time.Duration, error) {
	t, err := a.t.CPUTime(ctx, a.vm)
	if err != nil || a.disk == nil {
		return t, err
	}
	n, err := a.disk.DiskRequests(ctx, a.vm)
	if err != nil {
		return 0, err
	}
	return t + time.Duration(n)*diskRequestWeight, nil
}
