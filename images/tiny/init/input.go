package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/deskfarm/deskfarm/images/tiny/screen"
)

// Evdev event types and codes (linux/input-event-codes.h).
const (
	evSyn       = 0x00
	evKey       = 0x01
	evRel       = 0x02
	evAbs       = 0x03
	synReport   = 0
	synDropped  = 3
	relHWheel   = 0x06
	relWheel    = 0x08
	absX        = 0x00
	absY        = 0x01
	keyA        = 30
	eventSize   = 24 // struct input_event on 64-bit
	maxKeyCode  = 0x2ff
	eviocgbit   = 0x20 // EVIOCGBIT(ev, len) number base
	eviocgabs   = 0x40 // EVIOCGABS(abs) number base
	eviocgname  = 0x06
	eviocsrep   = 1<<30 | 8<<16 | 'E'<<8 | 0x03 // _IOW('E', 0x03, unsigned int[2])
	iocRead     = 2
	absInfoSize = 24
)

// eviocg returns the _IOC(_IOC_READ, 'E', nr, size) request number.
func eviocg(nr, size uintptr) uintptr {
	return iocRead<<30 | size<<16 | 'E'<<8 | nr
}

// inputEvent is one decoded struct input_event.
type inputEvent struct {
	typ, code uint16
	value     int32
}

// frame is the events of one device up to and excluding a SYN_REPORT.
type frame struct {
	dev    *device
	events []inputEvent
}

// device is an open /dev/input/eventN.
type device struct {
	path       string
	name       string
	fd         int
	keyboard   bool // has EV_KEY with KEY_A
	tablet     bool // has EV_ABS with ABS_X
	absMin     [2]int32
	absMax     [2]int32
	absInitial [2]int32
}

// deviceSet opens event devices as they appear and feeds their frames to
// events.
type deviceSet struct {
	events chan<- frame

	mu       sync.Mutex
	open     map[string]*device
	keyboard bool
	tablet   bool
	changed  chan struct{}
}

func newDeviceSet(events chan<- frame) *deviceSet {
	return &deviceSet{events: events, open: map[string]*device{}, changed: make(chan struct{})}
}

// scan opens new event devices: every deviceRescan during boot, then every
// deviceIdleGap.
func (s *deviceSet) scan() {
	start := time.Now()
	for {
		paths, _ := filepath.Glob("/dev/input/event*")
		for _, p := range paths {
			s.mu.Lock()
			_, ok := s.open[p]
			s.mu.Unlock()
			if ok {
				continue
			}
			d, err := openDevice(p)
			if err != nil {
				logf("input %s: %v", p, err)
				continue
			}
			logf("input %s: %q keyboard=%v tablet=%v abs x %d..%d y %d..%d",
				p, d.name, d.keyboard, d.tablet, d.absMin[0], d.absMax[0], d.absMin[1], d.absMax[1])
			s.mu.Lock()
			s.open[p] = d
			s.keyboard = s.keyboard || d.keyboard
			s.tablet = s.tablet || d.tablet
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			go s.read(d)
		}
		if time.Since(start) < inputTimeout {
			time.Sleep(deviceRescan)
		} else {
			time.Sleep(deviceIdleGap)
		}
	}
}

// waitReady waits until a keyboard and a tablet are open.
func (s *deviceSet) waitReady(timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		kb, tab, changed := s.keyboard, s.tablet, s.changed
		s.mu.Unlock()
		if kb && tab {
			return nil
		}
		select {
		case <-changed:
		case <-deadline:
			return fmt.Errorf("after %v: keyboard %v, tablet %v", timeout, kb, tab)
		}
	}
}

// read decodes d's events into frames until the device goes away.
func (s *deviceSet) read(d *device) {
	defer func() {
		unix.Close(d.fd)
		s.mu.Lock()
		delete(s.open, d.path)
		s.mu.Unlock()
	}()
	buf := make([]byte, eventSize*64)
	var cur []inputEvent
	dropping := false
	for {
		n, err := unix.Read(d.fd, buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue
			}
			logf("input %s: %v", d.path, err)
			return
		}
		for off := 0; off+eventSize <= n; off += eventSize {
			ev := inputEvent{
				typ:   binary.LittleEndian.Uint16(buf[off+16:]),
				code:  binary.LittleEndian.Uint16(buf[off+18:]),
				value: int32(binary.LittleEndian.Uint32(buf[off+20:])),
			}
			if ev.typ != evSyn {
				if !dropping {
					cur = append(cur, ev)
				}
				continue
			}
			switch ev.code {
			case synDropped:
				// The kernel's buffer overflowed: drop events up to the
				// next report, as libevdev does without resyncing.
				logf("input %s: events dropped", d.path)
				cur, dropping = cur[:0], true
			case synReport:
				if !dropping && len(cur) > 0 {
					s.events <- frame{dev: d, events: cur}
					cur = nil
				}
				dropping = false
			}
		}
	}
}

func openDevice(path string) (*device, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := &device{path: path, fd: fd}
	name := make([]byte, 256)
	if err := ioctlPtr(fd, eviocg(eviocgname, uintptr(len(name))), unsafe.Pointer(&name[0])); err == nil {
		d.name = string(name[:clen(name)])
	}
	var types [4]byte
	if err := ioctlPtr(fd, eviocg(eviocgbit, uintptr(len(types))), unsafe.Pointer(&types[0])); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("EVIOCGBIT: %w", err)
	}
	has := func(bits []byte, n int) bool { return n/8 < len(bits) && bits[n/8]&(1<<(n%8)) != 0 }
	if has(types[:], evKey) {
		keys := make([]byte, maxKeyCode/8+1)
		if ioctlPtr(fd, eviocg(eviocgbit+evKey, uintptr(len(keys))), unsafe.Pointer(&keys[0])) == nil {
			d.keyboard = has(keys, keyA)
		}
		if d.keyboard {
			// No kernel autorepeat: a key held while the guest is slow
			// must not type more than the host sent.
			var rep [2]uint32 // delay, period
			if err := ioctlPtr(fd, eviocsrep, unsafe.Pointer(&rep[0])); err != nil {
				logf("input %s: turning autorepeat off: %v", path, err)
			}
		}
	}
	if has(types[:], evAbs) {
		for axis := 0; axis < 2; axis++ {
			var info [absInfoSize / 4]int32 // value, minimum, maximum, fuzz, flat, resolution
			if err := ioctlPtr(fd, eviocg(eviocgabs+uintptr(axis), absInfoSize), unsafe.Pointer(&info[0])); err != nil {
				continue
			}
			d.absInitial[axis], d.absMin[axis], d.absMax[axis] = info[0], info[1], info[2]
			if axis == absX {
				d.tablet = true
			}
		}
	}
	return d, nil
}

// model applies input frames to the screen and the input log. It owns the
// canvas, the keyboard state and the pointer position.
type model struct {
	events   chan frame
	canvas   *screen.Canvas
	fb       *framebuffer // nil: draw off-screen only
	log      *os.File     // the input log; nil if it cannot be opened
	textPath string
	kb       screen.Keyboard

	abs     map[*device][2]int32
	pos     image.Point
	posInit bool
	text    string
}

func newModel(c *screen.Canvas, fb *framebuffer, logPath, textPath string) *model {
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		logf("input log: %v", err)
		f = nil
	}
	writeFile(textPath, "")
	return &model{events: make(chan frame, 64), canvas: c, fb: fb, log: f, textPath: textPath, abs: map[*device][2]int32{}}
}

// run applies frames as they come. A frame that makes apply panic is
// reported and skipped: PID 1 must not die.
func (m *model) run() {
	for f := range m.events {
		func() {
			defer func() {
				if r := recover(); r != nil {
					logf("input frame %v from %s: panic: %v", f.events, f.dev.path, r)
				}
			}()
			m.apply(f)
		}()
	}
}

// apply handles one frame: position first (so buttons in the same frame
// carry it), then keys, buttons and wheels in order; then one write to the
// log and one flush of the changed area.
func (m *model) apply(f frame) {
	var lines strings.Builder
	var damage image.Rectangle

	abs, seen := m.abs[f.dev]
	if !seen {
		abs = f.dev.absInitial
	}
	moved := false
	for _, ev := range f.events {
		if ev.typ == evAbs && (ev.code == absX || ev.code == absY) {
			abs[ev.code] = ev.value
			moved = true
		}
	}
	m.abs[f.dev] = abs
	if moved {
		p := m.pointer(f.dev, abs)
		if p != m.pos || !m.posInit {
			m.pos, m.posInit = p, true
			lines.WriteString(screen.MotionLine(p))
		}
	}

	for _, ev := range f.events {
		switch ev.typ {
		case evKey:
			if b, ok := screen.ButtonFromCode(ev.code); ok {
				if ev.value == 2 {
					continue
				}
				lines.WriteString(screen.ButtonLine(b, ev.value == 1, m.pos))
				if ev.value == 1 {
					damage = damage.Union(m.canvas.Marker(b, m.pos))
				}
				continue
			}
			switch ev.code {
			case screen.BtnGearUp, screen.BtnGearDown:
				if ev.value == 1 {
					n := int32(1)
					if ev.code == screen.BtnGearDown {
						n = -1
					}
					lines.WriteString(screen.WheelLine(n, false))
				}
				continue
			}
			if ev.code >= 0x100 {
				continue // other buttons (touch, stylus, joystick)
			}
			lines.WriteString(screen.KeyLine(ev.code, ev.value))
			if r, ok := m.kb.Key(ev.code, ev.value); ok {
				damage = damage.Union(m.canvas.Type(r))
				lines.WriteString(screen.TypedLine(r))
			}
		case evRel:
			switch ev.code {
			case relWheel:
				lines.WriteString(screen.WheelLine(ev.value, false))
			case relHWheel:
				lines.WriteString(screen.WheelLine(ev.value, true))
			}
		}
	}

	if lines.Len() > 0 && m.log != nil {
		if _, err := m.log.WriteString(lines.String()); err != nil {
			logf("input log: %v", err)
		}
	}
	if !damage.Empty() {
		m.fb.flush(m.canvas.Img, damage)
	}
	if t := m.canvas.Text(); t != m.text {
		m.text = t
		writeFile(m.textPath, t)
	}
}

// pointer maps a device's axis values to a screen pixel. QEMU's tablets use
// 0..0x7fff, which screen.Pointer inverts exactly; other ranges are scaled
// linearly.
func (m *model) pointer(d *device, abs [2]int32) image.Point {
	sz := m.canvas.Size()
	if d.absMin == [2]int32{0, 0} && d.absMax == [2]int32{screen.AbsMax, screen.AbsMax} {
		return screen.Pointer(int(abs[0]), int(abs[1]), sz.X, sz.Y)
	}
	scale := func(v, lo, hi int32, n int) int {
		if hi <= lo {
			return 0
		}
		p := int(int64(v-lo) * int64(n-1) / int64(hi-lo))
		return max(0, min(p, n-1))
	}
	return image.Pt(scale(abs[0], d.absMin[0], d.absMax[0], sz.X), scale(abs[1], d.absMin[1], d.absMax[1], sz.Y))
}
