package video

import (
	"context"
	"fmt"
	"image"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vnc"
)

// page is a synthetic 1280x800 desktop showing a window onto a tall page
// of text-like glyphs (dark blocks on white), as a browser or terminal
// shows: scrolling moves the window, typing adds glyphs at a caret.
type page struct {
	mu     sync.Mutex
	w, h   int
	text   *image.RGBA // the whole page, h*4 tall
	top    int         // the first row shown
	caret  int         // glyphs typed on the typing line
	damage chan vnc.Damage
}

func newPage(w, h int) *page {
	p := &page{w: w, h: h, text: image.NewRGBA(image.Rect(0, 0, w, 4*h)), damage: make(chan vnc.Damage, 64)}
	for i := range p.text.Pix {
		p.text.Pix[i] = 255
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for line := 0; line < 4*h/20; line++ {
		for x := 10; x < w-10; x += 9 {
			if rnd.IntN(6) == 0 {
				continue // a space
			}
			p.glyph(rnd, x, line*20+4)
		}
	}
	return p
}

// glyph draws a dark 7x12 pseudo-letter at x, y.
func (p *page) glyph(rnd *rand.Rand, x, y int) {
	bits := rnd.Uint64()
	for dy := range 12 {
		for dx := range 7 {
			if bits>>(dy*5+dx)&1 == 1 {
				o := p.text.PixOffset(x+dx, y+dy)
				copy(p.text.Pix[o:o+4], []byte{30, 30, 40, 255})
			}
		}
	}
}

func (p *page) Snapshot() *image.RGBA {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := image.NewRGBA(image.Rect(0, 0, p.w, p.h))
	copy(out.Pix, p.text.Pix[p.text.PixOffset(0, p.top):])
	return out
}

func (p *page) Damage() (<-chan vnc.Damage, func()) { return p.damage, func() {} }

// scroll moves the window down three text lines (a wheel notch).
func (p *page) scroll() {
	p.mu.Lock()
	p.top = (p.top + 60) % (3 * p.h)
	p.mu.Unlock()
	p.damage <- vnc.Damage{Rect: image.Rect(0, 0, p.w, p.h)}
}

// typeGlyph adds one letter on a line near the bottom.
func (p *page) typeGlyph(rnd *rand.Rand) {
	p.mu.Lock()
	x := 10 + (p.caret%130)*9
	y := p.top + p.h - 40
	p.glyph(rnd, x, y)
	p.caret++
	p.mu.Unlock()
	p.damage <- vnc.Damage{Rect: image.Rect(x, y-p.top, x+7, y-p.top+12)}
}

// BenchmarkVideoCPU is ffmpeg's CPU per recording desktop at 1280x800 and
// the file it writes, for a still screen, typing (8 letters a second) and
// scrolling (a full-screen change 20 times a second, capped at 10 fps).
// Each case records 20 s of wall time:
//
//	go test -run '^$' -bench VideoCPU -benchtime 1x ./video/
//
// cpu-%core is ffmpeg's user+system time over the recording's length;
// go-%core this process's (the feeder: snapshots, finding changed rows,
// converting them to YUV, writing the pipe; and the synthetic page's
// painting, which costs little); MB/min the file's bytes per minute.
func BenchmarkVideoCPU(b *testing.B) {
	needFFmpeg(b)
	const span = 20 * time.Second
	cases := []struct {
		name  string
		every time.Duration // 0: nothing changes
		act   func(p *page, rnd *rand.Rand)
	}{
		{"still", 0, nil},
		{"typing", time.Second / 8, func(p *page, rnd *rand.Rand) { p.typeGlyph(rnd) }},
		{"scrolling", time.Second / 20, func(p *page, rnd *rand.Rand) { p.scroll() }},
		// A screen that changes faster than any cap: what each cap costs.
		{"scrolling-30hz", time.Second / 30, func(p *page, rnd *rand.Rand) { p.scroll() }},
	}
	for _, c := range cases {
		// 10: trajectories' default; 25: OSWorld's recordings
		// (osworld.DefaultRecordFPS).
		for _, fps := range []int{DefaultMaxFPS, 25} {
			b.Run(fmt.Sprintf("%s/fps=%d", c.name, fps), func(b *testing.B) {
				var cpu, self, dur time.Duration
				var bytes int64
				var frames int
				for range b.N {
					p := newPage(1280, 800)
					before := selfCPU()
					r, err := Start(context.Background(), p, filepath.Join(b.TempDir(), "rec.mp4"), Options{MaxFPS: fps})
					if err != nil {
						b.Fatal(err)
					}
					rnd := rand.New(rand.NewPCG(3, 4))
					end := time.After(span)
					var tick <-chan time.Time
					if c.every > 0 {
						t := time.NewTicker(c.every)
						tick = t.C
						defer t.Stop()
					}
				run:
					for {
						select {
						case <-tick:
							c.act(p, rnd)
						case <-end:
							break run
						}
					}
					info, err := r.Stop(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					self += selfCPU() - before
					cpu += info.CPU
					dur += info.Duration
					bytes += info.Bytes
					frames += info.Frames
				}
				b.ReportMetric(100*cpu.Seconds()/dur.Seconds(), "cpu-%core")
				b.ReportMetric(100*self.Seconds()/dur.Seconds(), "go-%core")
				b.ReportMetric(float64(bytes)/1e6/dur.Minutes(), "MB/min")
				b.ReportMetric(float64(frames)/dur.Seconds(), "frames/s")
			})
		}
	}
}

// selfCPU is this process's user+system CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
