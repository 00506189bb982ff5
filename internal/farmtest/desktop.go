package farmtest

import (
	"context"
	"image"
	"image/color"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/deskfarm/deskfarm/vnc/vnctest"
	"github.com/deskfarm/deskfarm/web"
)

// Desktop is a served farm with pools and live (fake) displays: episodes
// start, and actions play on Screens that record what they got.
type Desktop struct {
	Server *httptest.Server
	// Farm is the in-memory farm under it, for faults and limits.
	Farm *vmmtest.Farm
	mu   sync.Mutex
	// screens by VM id, made as desks dial them.
	screens map[string]*Screen
}

// Screen returns the display of a VM, or nil before its desk dialled it.
func (d *Desktop) Screen(vm string) *Screen {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.screens[vm]
}

// ServeDesktop serves the API over NewFarm with one pool, "desktop" (image
// desktop, one warm VM, at most two), and desks over Screens of 1280x800,
// so that the "auto" screenshot size is the native one and agent
// coordinates are screen pixels.
func ServeDesktop(t testing.TB, opts web.Options) *Desktop {
	t.Helper()
	farm := NewFarm()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "desktop", Image: "desktop",
		MemoryMiB: 1024, VCPUs: 1, MinWarm: 1, Max: 2}}}
	cfg.SetDefaults()
	pools, err := pool.New(context.Background(), farm, cfg, pool.Options{StateDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	d := &Desktop{Farm: farm, screens: map[string]*Screen{}}
	desks := desk.New(farm, desk.Options{Log: log, Dial: func(_ context.Context, vm vmm.VM, _ *slog.Logger) (desk.Display, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		s := &Screen{}
		d.screens[vm.ID] = s
		return s, nil
	}})
	opts.Desks, opts.Pools, opts.Logger = desks, pools, log
	d.Server = httptest.NewServer(web.NewServer(farm, opts))
	t.Cleanup(func() { d.Server.Close(); desks.Close(); pools.Close(); farm.Close() })
	return d
}

// Screen is a still 1280x800 desk.Display that records the input it gets.
type Screen struct {
	vnctest.Still
	mu      sync.Mutex
	x, y    int
	buttons uint8
	clicks  []image.Point // where the left button went down
	typed   []rune        // keysyms pressed, for the Latin-1 ones
}

// Clicks returns where the left button was pressed, in order.
func (s *Screen) Clicks() []image.Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]image.Point(nil), s.clicks...)
}

// Typed returns the characters of the keys pressed (Latin-1 keysyms are
// their characters; Return is '\n'; other keys are left out).
func (s *Screen) Typed() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.typed)
}

func (s *Screen) Size() (int, int) { return 1280, 800 }

func (s *Screen) SnapshotRaw() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = 0x20, 0x40, 0x80, 0xff
	}
	img.Set(0, 0, color.White)
	return img
}

func (s *Screen) Snapshot() *image.RGBA { return s.SnapshotRaw() }

func (s *Screen) CursorPos() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.x, s.y
}

func (s *Screen) Settle(context.Context, time.Duration, time.Duration) (time.Duration, error) {
	return 0, nil
}

func (s *Screen) Pointer(x, y int, b uint8) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b&1 != 0 && s.buttons&1 == 0 {
		s.clicks = append(s.clicks, image.Pt(x, y))
	}
	s.x, s.y, s.buttons = x, y, b
	return nil
}

func (s *Screen) Key(keysym uint32, _ uint16, down bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !down {
		return nil
	}
	switch {
	case keysym >= 0x20 && keysym <= 0xff:
		s.typed = append(s.typed, rune(keysym))
	case keysym == 0xff0d: // Return
		s.typed = append(s.typed, '\n')
	}
	return nil
}
