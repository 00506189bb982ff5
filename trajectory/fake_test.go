package trajectory

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vnc"
)

// fakeScreen is a framebuffer the test paints; every subscriber of Damage
// hears of each paint before paint returns (or has cancelled).
type fakeScreen struct {
	mu   sync.Mutex // the picture and the cursor
	img  *image.RGBA
	x, y int
	// subMu guards the subscribers and is held while telling them, never
	// with mu: a subscriber may take a snapshot before it receives again.
	subMu  sync.Mutex
	subs   []*fakeSub
	closed bool
}

type fakeSub struct {
	c    chan vnc.Damage
	done chan struct{} // closed at cancel, so a send in progress gives up
	once sync.Once
}

func newFakeScreen(w, h int) *fakeScreen {
	s := &fakeScreen{img: image.NewRGBA(image.Rect(0, 0, w, h))}
	draw.Draw(s.img, s.img.Rect, image.NewUniform(color.RGBA{0, 0, 0, 255}), image.Point{}, draw.Src)
	return s
}

func (s *fakeScreen) Snapshot() *image.RGBA {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := image.NewRGBA(s.img.Rect)
	copy(c.Pix, s.img.Pix)
	return c
}

func (s *fakeScreen) Damage() (<-chan vnc.Damage, func()) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	sub := &fakeSub{c: make(chan vnc.Damage), done: make(chan struct{})}
	if s.closed {
		close(sub.c)
		return sub.c, func() {}
	}
	s.subs = append(s.subs, sub)
	return sub.c, func() {
		sub.once.Do(func() {
			close(sub.done)
			s.subMu.Lock()
			defer s.subMu.Unlock()
			for i, d := range s.subs {
				if d == sub {
					s.subs = append(s.subs[:i], s.subs[i+1:]...)
					close(sub.c)
				}
			}
		})
	}
}

func (s *fakeScreen) CursorPos() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.x, s.y
}

// tell sends d to every subscriber, and a second, empty one: the second
// send waits for the first to be handled.
func (s *fakeScreen) tell(d vnc.Damage) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for _, sub := range s.subs {
		for _, e := range []vnc.Damage{d, {}} {
			select {
			case sub.c <- e:
			case <-sub.done:
			}
		}
	}
}

// paint fills a rectangle and moves the cursor; the recorder's damage
// watch has seen it when paint returns.
func (s *fakeScreen) paint(r image.Rectangle, c color.RGBA, x, y int) {
	s.mu.Lock()
	draw.Draw(s.img, r, image.NewUniform(c), image.Point{}, draw.Src)
	s.x, s.y = x, y
	s.mu.Unlock()
	s.tell(vnc.Damage{Rect: r})
}

// set shows img (not copied; the caller keeps it unchanged) and tells
// the subscribers, as paint does.
func (s *fakeScreen) set(img *image.RGBA) {
	s.mu.Lock()
	s.img = img
	s.mu.Unlock()
	s.tell(vnc.Damage{Rect: img.Rect})
}

func (s *fakeScreen) close() {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	s.closed = true
	for _, sub := range s.subs {
		sub.once.Do(func() { close(sub.done); close(sub.c) })
	}
	s.subs = nil
}

type fakeDesks struct {
	mu      sync.Mutex
	screens map[string]*fakeScreen
	inputs  map[string]chan desk.HumanInput
}

func newFakeDesks() *fakeDesks {
	return &fakeDesks{screens: map[string]*fakeScreen{}, inputs: map[string]chan desk.HumanInput{}}
}

func (d *fakeDesks) screen(vm string) *fakeScreen {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.screens[vm]
	if s == nil {
		s = newFakeScreen(1280, 800)
		d.screens[vm] = s
	}
	return s
}

func (d *fakeDesks) Screen(_ context.Context, vm string) (Screen, error) { return d.screen(vm), nil }

func (d *fakeDesks) HumanInputs(_ context.Context, vm string) (<-chan desk.HumanInput, func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := make(chan desk.HumanInput, 16)
	d.inputs[vm] = c
	// Not idempotent on purpose: a second cancel panics, as a close does.
	return c, func() { close(c) }, nil
}

// input is the VM's takeover channel of the current recording.
func (d *fakeDesks) input(vm string) chan desk.HumanInput {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inputs[vm]
}

// agentPNG is what the web layer would have sent the agent: the screen
// scaled to size, PNG at BestSpeed.
func agentPNG(t testing.TB, s *fakeScreen, size image.Point) []byte {
	t.Helper()
	return encodeAt(t, s.Snapshot(), size)
}

// encodeAt is img scaled to size as the agent's screenshots are, in PNG.
func encodeAt(t testing.TB, img *image.RGBA, size image.Point) []byte {
	t.Helper()
	sc, err := player.NewScaler(img.Rect.Dx(), img.Rect.Dy(), player.ScreenshotSize{Mode: player.SizeFixed, Width: size.X, Height: size.Y})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := player.Encode(sc.Screenshot(img), player.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readArchive reads a tar or zip export into name -> bytes, in order.
func readArchive(t *testing.T, format string, b []byte) ([]string, map[string][]byte) {
	t.Helper()
	files := map[string][]byte{}
	var names []string
	switch format {
	case api.ExportTar:
		tr := tar.NewReader(bytes.NewReader(b))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("tar: %v", err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			files[h.Name] = data
		}
	case api.ExportZip:
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("zip: %v", err)
		}
		for _, f := range zr.File {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, f.Name)
			files[f.Name] = data
		}
	}
	return names, files
}

// waitKept waits until the recorder's writer has written n steps (a sync
// point, not a timing assertion: it fails only after a minute).
func waitKept(t testing.TB, r *Recorder, n int) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		k := r.kept
		r.mu.Unlock()
		if k >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	panic(fmt.Sprintf("the writer kept fewer than %d steps in a minute", n))
}

// clock is a settable Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
