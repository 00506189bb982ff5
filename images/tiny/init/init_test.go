package main

import (
	"image"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/deskfarm/deskfarm/images/tiny/screen"
)

// tablet is a device like QEMU's virtio tablet.
var tablet = &device{path: "/dev/input/event1", tablet: true, absMax: [2]int32{screen.AbsMax, screen.AbsMax}}

var keyboard = &device{path: "/dev/input/event0", keyboard: true}

func newTestModel(t *testing.T, w, h int) (*model, string) {
	t.Helper()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "input.log")
	return newModel(screen.NewCanvas(w, h), nil, logPath, filepath.Join(dir, "text")), logPath
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestClickFrame replays what QEMU 7.2 sends for a VNC click at (640, 400):
// the button before the axes, then SYN_REPORT.
func TestClickFrame(t *testing.T) {
	m, logPath := newTestModel(t, 1280, 800)
	ax, ay := screen.AbsPoint(image.Pt(640, 400), 1280, 800)
	m.apply(frame{dev: tablet, events: []inputEvent{
		{evKey, screen.BtnLeft, 1}, {evAbs, absX, int32(ax)}, {evAbs, absY, int32(ay)},
	}})
	m.apply(frame{dev: tablet, events: []inputEvent{{evKey, screen.BtnLeft, 0}}})
	m.apply(frame{dev: tablet, events: []inputEvent{{evRel, relWheel, -1}}})
	m.apply(frame{dev: tablet, events: []inputEvent{{evKey, screen.BtnGearUp, 1}}})
	m.apply(frame{dev: tablet, events: []inputEvent{{evKey, screen.BtnGearUp, 0}}})
	want := "motion 640 400\nbutton down left 640 400\nbutton up left 640 400\nwheel -1\nwheel 1\n"
	if got := readFile(t, logPath); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
	expect := screen.NewCanvas(1280, 800)
	expect.Marker(screen.ButtonLeft, image.Pt(640, 400))
	if !equalImages(m.canvas.Img, expect.Img) {
		t.Error("canvas differs from one marker at 640,400")
	}
}

func TestKeyFrames(t *testing.T) {
	m, logPath := newTestModel(t, 1280, 800)
	for _, ev := range []inputEvent{
		{evKey, screen.KeyLeftShift, 1}, {evKey, 35, 1}, {evKey, 35, 0}, {evKey, screen.KeyLeftShift, 0},
		{evKey, 23, 1}, {evKey, 23, 0}, {evKey, screen.KeyEnter, 1}, {evKey, screen.KeyEnter, 0},
		{evKey, 23, 2},
	} {
		m.apply(frame{dev: keyboard, events: []inputEvent{ev}})
	}
	want := strings.Join([]string{
		"key down 42 leftshift", "key down 35 h", "char H", "key up 35 h", "key up 42 leftshift",
		"key down 23 i", "char i", "key up 23 i", "key down 28 enter", "newline", "key up 28 enter",
		"key repeat 23 i", "",
	}, "\n")
	if got := readFile(t, logPath); got != want {
		t.Errorf("log:\n%s\nwant:\n%s", got, want)
	}
	if got := readFile(t, m.textPath); got != "Hi\n" {
		t.Errorf("text file %q", got)
	}
}

func TestFlushXRGB8888(t *testing.T) {
	img := screen.NewCanvas(16, 8).Img
	img.Set(3, 2, screen.MarkerLeft)
	fb := &framebuffer{fd: -1, mem: make([]byte, 80*8), width: 16, height: 8, stride: 80, bytesPP: 4,
		r: fbBitfield{Offset: 16, Length: 8}, g: fbBitfield{Offset: 8, Length: 8}, b: fbBitfield{Offset: 0, Length: 8}}
	fb.flush(img, img.Rect)
	px := fb.mem[2*80+3*4:]
	c := screen.MarkerLeft
	if px[0] != c.B || px[1] != c.G || px[2] != c.R {
		t.Errorf("pixel bytes %x, want B G R of %v", px[:4], c)
	}
	if fb.mem[16*4] != 0 {
		t.Error("wrote past the line's pixels into its padding")
	}
}

func TestFlushRGB565(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 2, 1))
	img.Pix = []byte{0xff, 0x00, 0x00, 0xff, 0x00, 0x00, 0xff, 0xff}
	fb := &framebuffer{fd: -1, mem: make([]byte, 4), width: 2, height: 1, stride: 4, bytesPP: 2,
		r: fbBitfield{Offset: 11, Length: 5}, g: fbBitfield{Offset: 5, Length: 6}, b: fbBitfield{Offset: 0, Length: 5}}
	fb.flush(img, img.Rect)
	if got := []byte(fb.mem); got[0] != 0x00 || got[1] != 0xf8 || got[2] != 0x1f || got[3] != 0x00 {
		t.Errorf("RGB565 bytes %x, want 00f8 1f00", got)
	}
}

func equalImages(a, b *image.RGBA) bool {
	return a.Rect == b.Rect && string(a.Pix) == string(b.Pix)
}

func TestSessionReply(t *testing.T) {
	var got unix.Timespec
	setClock = func(ts *unix.Timespec) error { got = *ts; return nil }
	defer func() { setClock = func(ts *unix.Timespec) error { return unix.ClockSettime(unix.CLOCK_REALTIME, ts) } }()
	if r := sessionReply("time 1700000000123456789"); r != "ok time 1700000000123456789" {
		t.Errorf("reply %q", r)
	}
	if got.Sec != 1700000000 || got.Nsec != 123456789 {
		t.Errorf("clock set to %v", got)
	}
	if r := sessionReply("time soon"); !strings.HasPrefix(r, "err time ") {
		t.Errorf("bad time: reply %q", r)
	}
	if r := sessionReply("hello"); r != "" {
		t.Errorf("unknown line: reply %q", r)
	}
}
