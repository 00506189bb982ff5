package trajectory

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
)

// desktopPicture draws something that compresses like a desktop: a light
// background, a title bar, and lines of dark "glyphs" (random 6x10 cells),
// so PNG sizes and encoding times are those of text on a screen rather
// than of a flat colour.
func desktopPicture(w, h int, seed uint64) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rnd := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = 238, 238, 236, 255
	}
	fill := func(r image.Rectangle, c color.RGBA) {
		r = r.Intersect(img.Rect)
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				img.SetRGBA(x, y, c)
			}
		}
	}
	fill(image.Rect(0, 0, w, 28), color.RGBA{48, 48, 56, 255})
	for y := 40; y < h-20; y += 18 {
		width := 200 + rnd.IntN(w-260)
		for x := 20; x < width; x += 7 {
			if rnd.IntN(6) == 0 {
				continue // a space
			}
			for py := 0; py < 10; py++ {
				for px := 0; px < 6; px++ {
					if rnd.IntN(3) == 0 {
						img.SetRGBA(x+px, y+py, color.RGBA{30, 30, 30, 255})
					}
				}
			}
		}
	}
	return img
}

// benchRecorder is a recording of a fake 1280x800 screen without video.
func benchRecorder(b *testing.B) (*Recorder, *fakeScreen) {
	d := newFakeDesks()
	m, err := New(Config{Dir: b.TempDir(), Desks: d, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.stopAll("done") })
	if _, err := m.Start(context.Background(), Meta{VM: "vm", Options: api.RecordOptions{NoVideo: true}}); err != nil {
		b.Fatal(err)
	}
	return m.Recorder("vm"), d.screen("vm")
}

// threadCPU is the calling thread's CPU time (RUSAGE_THREAD): what a
// step costs the caller, whatever else the host runs meanwhile.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var benchSizes = []image.Point{{1280, 800}, {1024, 640}}

// BenchmarkEnd measures what recording adds on the caller's goroutine
// (the web request's path) per step at 1280x800 native: Begin and End,
// the screen having changed before each (so each takes a snapshot). The
// writer runs meanwhile; each step waits for it outside the timer, so
// the queue never fills (a full queue would make End cheaper still).
// begin- and end-cpu-us/step are the caller thread's CPU in each, which
// other load on the host does not inflate as it does ns/op; each is mostly
// one snapshot (a copy of the 4 MB framebuffer, as desk's is).
func BenchmarkEnd(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("agent=%dx%d", size.X, size.Y), func(b *testing.B) {
			r, s := benchRecorder(b)
			pics := make([]*image.RGBA, 8)
			shots := make([][]byte, len(pics))
			resps := make([]json.RawMessage, len(pics))
			for i := range pics {
				pics[i] = desktopPicture(1280, 800, uint64(i))
				shots[i] = encodeAt(b, pics[i], size)
				resps[i] = json.RawMessage(fmt.Sprintf(`{"type":"tool_result","content":[{"type":"image","source":{"data":%q}}]}`, base64.StdEncoding.EncodeToString(shots[i])))
			}
			req := json.RawMessage(`{"tool":"computer_20251124","input":{"action":"left_click","coordinate":[10,20]}}`)
			acts := []actions.Action{actions.Click{At: &actions.Point{X: 10, Y: 20}}}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var begin, end time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				waitKept(nil, r, i)
				s.set(pics[i%len(pics)])
				b.StartTimer()
				c0 := threadCPU()
				p := r.Begin()
				begin += threadCPU() - c0
				b.StopTimer()
				s.set(pics[(i+1)%len(pics)])
				b.StartTimer()
				c0 = threadCPU()
				p.End(Call{Kind: api.KindActions, Tool: "computer_20251124", Request: req, Response: resps[(i+1)%len(pics)],
					Actions: acts, Status: 200, ScreenshotSize: size, AfterImage: shots[(i+1)%len(pics)]})
				end += threadCPU() - c0
			}
			b.ReportMetric(float64(begin.Nanoseconds())/1000/float64(b.N), "begin-cpu-us/step")
			b.ReportMetric(float64(end.Nanoseconds())/1000/float64(b.N), "end-cpu-us/step")
		})
	}
}

// BenchmarkWriter measures the recorder's goroutine per step at 1280x800:
// the steady state of an agent's steps, each one's before the previous
// one's after (found again by its pixels) and its after the agent's PNG
// (written as it is), plus, when the agent's size is not native, the
// native after encoded. cpu-ms/step is the process's CPU (GC included).
func BenchmarkWriter(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("agent=%dx%d", size.X, size.Y), func(b *testing.B) {
			r, _ := benchRecorder(b)
			r.stop("benchmark") // the writer goroutine ends; the benchmark writes itself
			<-r.done
			var err error
			r.steps, err = openAppend(r.dir)
			if err != nil {
				b.Fatal(err)
			}
			defer r.steps.Close()
			prev := desktopPicture(1280, 800, 0)
			var busy time.Duration
			var bytes int64
			for i := range b.N {
				b.StopTimer()
				next := desktopPicture(1280, 800, uint64(i+1))
				shot := encodeAt(b, next, size)
				j := job{
					step: api.TrajectoryStep{Step: i + 1, Kind: api.KindActions, Request: json.RawMessage(`{"tool":"neutral"}`),
						Response: json.RawMessage(fmt.Sprintf(`{"data":%q}`, base64.StdEncoding.EncodeToString(shot)))},
					actions: []actions.Action{actions.Screenshot{}}, size: size, before: prev, afterNative: next, afterImage: shot, hasPictures: true,
				}
				before := r.written.Load()
				c0 := cpuTime()
				b.StartTimer()
				if err := r.write(&j); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				busy += cpuTime() - c0
				bytes += r.written.Load() - before
				prev = next
			}
			b.ReportMetric(float64(busy.Microseconds())/1000/float64(b.N), "cpu-ms/step")
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/step")
		})
	}
}
