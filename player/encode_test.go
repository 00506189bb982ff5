package player

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand"
	"testing"

	"github.com/disintegration/imaging"
)

// desktopImage draws a deterministic desktop-like w x h image: a flat
// background, a panel with a gradient, windows with title bars and 1-px
// borders, dense runs of small anti-aliased "glyphs" (text), an icon grid and
// a photo-like noisy patch. Screenshots are mostly flat colour and text, which
// is what makes PNG and the resampling filters behave as they do.
func desktopImage(w, h int) *image.RGBA {
	rng := rand.New(rand.NewSource(1))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill := func(r image.Rectangle, c color.RGBA) {
		draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
	}
	fill(img.Rect, color.RGBA{58, 110, 165, 255})
	for y := 0; y < 28 && y < h; y++ { // panel
		v := uint8(40 + y)
		fill(image.Rect(0, y, w, y+1), color.RGBA{v, v, v + 10, 255})
	}
	for i := 0; i < 24; i++ { // icons
		x, y := 16+(i%3)*72, 48+(i/3)*80
		fill(image.Rect(x, y, x+40, y+40), color.RGBA{uint8(rng.Intn(255)), uint8(rng.Intn(255)), uint8(rng.Intn(255)), 255})
	}
	text := func(r image.Rectangle) {
		for y := r.Min.Y + 4; y+12 < r.Max.Y; y += 16 {
			x := r.Min.X + 6
			for x+7 < r.Max.X {
				if rng.Intn(7) == 0 { // word gap
					x += 5
					continue
				}
				for gy := 0; gy < 11; gy++ {
					for gx := 0; gx < 6; gx++ {
						if rng.Intn(4) == 0 {
							v := uint8([]int{0, 40, 90, 160}[rng.Intn(4)])
							img.SetRGBA(x+gx, y+gy, color.RGBA{v, v, v, 255})
						}
					}
				}
				x += 7
			}
		}
	}
	for i, r := range []image.Rectangle{
		image.Rect(w/5, h/8, w*3/4, h*3/4),
		image.Rect(w/3, h/3, w*9/10, h*9/10),
	} {
		fill(r, color.RGBA{120, 120, 130, 255}) // border
		fill(r.Inset(1), color.RGBA{250, 250, 250, 255})
		fill(image.Rect(r.Min.X+1, r.Min.Y+1, r.Max.X-1, r.Min.Y+26), color.RGBA{uint8(220 - 30*i), 225, 232, 255})
		text(image.Rect(r.Min.X+1, r.Min.Y+30, r.Max.X-1, r.Max.Y-1))
	}
	// Photo-like patch: smooth value noise.
	pr := image.Rect(w-w/4, 40, w-10, 40+h/4).Intersect(img.Rect)
	for y := pr.Min.Y; y < pr.Max.Y; y++ {
		for x := pr.Min.X; x < pr.Max.X; x++ {
			f := 0.5 + 0.25*math.Sin(float64(x)/17) + 0.25*math.Cos(float64(y)/11)
			n := uint8(rng.Intn(24))
			img.SetRGBA(x, y, color.RGBA{uint8(f*200) + n, uint8(f*150) + n, uint8(255-f*200) - n, 255})
		}
	}
	return img
}

func BenchmarkEncode(b *testing.B) {
	img := desktopImage(1280, 800)
	nrgba := imaging.Clone(img)
	cases := []struct {
		name string
		enc  func(*bytes.Buffer) error
	}{
		{"PNGDefault", func(w *bytes.Buffer) error { return png.Encode(w, img) }},
		{"PNGBestSpeed", func(w *bytes.Buffer) error {
			return (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(w, img)
		}},
		{"PNGBestSpeedPooled", func(w *bytes.Buffer) error { return pngEncoder.Encode(w, img) }},
		{"JPEGq75RGBA", func(w *bytes.Buffer) error { return jpeg.Encode(w, img, &jpeg.Options{Quality: 75}) }},
		{"JPEGq75NRGBA", func(w *bytes.Buffer) error { return jpeg.Encode(w, nrgba, &jpeg.Options{Quality: 75}) }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var buf bytes.Buffer
			for i := 0; i < b.N; i++ {
				buf.Reset()
				if err := c.enc(&buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len())/1024, "KiB")
		})
	}
}

var resizeFilters = []struct {
	name string
	f    imaging.ResampleFilter
}{
	{"NearestNeighbor", imaging.NearestNeighbor},
	{"Box", imaging.Box},
	{"Linear", imaging.Linear},
	{"CatmullRom", imaging.CatmullRom},
	{"Lanczos", imaging.Lanczos},
}

func BenchmarkResize(b *testing.B) {
	for _, sz := range []struct {
		name         string
		w, h, tw, th int
	}{
		{"1920x1080to1366x768", 1920, 1080, 1366, 768},
		{"1280x800to1024x640", 1280, 800, 1024, 640},
	} {
		img := desktopImage(sz.w, sz.h)
		for _, f := range resizeFilters {
			b.Run(sz.name+"/"+f.name, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					imaging.Resize(img, sz.tw, sz.th, f.f)
				}
			})
		}
	}
}

// BenchmarkEncodeScaled encodes a 1920x1080 desktop scaled to 1366x768 with
// each filter: resampled text has more distinct colours, so PNG costs more
// than on a native frame of the same size.
func BenchmarkEncodeScaled(b *testing.B) {
	img := desktopImage(1920, 1080)
	for _, f := range resizeFilters {
		scaled := toRGBA(imaging.Resize(img, 1366, 768, f.f))
		b.Run("PNGBestSpeed/"+f.name, func(b *testing.B) {
			var buf bytes.Buffer
			for i := 0; i < b.N; i++ {
				buf.Reset()
				if err := pngEncoder.Encode(&buf, scaled); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len())/1024, "KiB")
		})
	}
	native := desktopImage(1366, 768)
	b.Run("PNGBestSpeed/native1366x768", func(b *testing.B) {
		var buf bytes.Buffer
		for i := 0; i < b.N; i++ {
			buf.Reset()
			if err := pngEncoder.Encode(&buf, native); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len())/1024, "KiB")
	})
}

// BenchmarkScreenshot is the whole auto-size screenshot path: scale a
// 1920x1080 snapshot to 1366x768 and encode it.
func BenchmarkScreenshot(b *testing.B) {
	img := desktopImage(1920, 1080)
	s, _ := NewScaler(1920, 1080, ScreenshotSize{Mode: SizeAuto})
	for _, f := range []ImageFormat{FormatPNG, FormatJPEG} {
		b.Run(string(f), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, _, err := Encode(s.Screenshot(img), EncodeOptions{Format: f}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// areaDownscale is the exact area-weighted average downscale (each output
// pixel the mean of the source area it covers, fractional pixels weighted):
// the alias-free reference for text and thin lines.
func areaDownscale(src *image.RGBA, tw, th int) *image.RGBA {
	sw, sh := src.Rect.Dx(), src.Rect.Dy()
	weights := func(n, tn int) [][]struct {
		i int
		w float64
	} {
		out := make([][]struct {
			i int
			w float64
		}, tn)
		scale := float64(n) / float64(tn)
		for t := 0; t < tn; t++ {
			a, b := float64(t)*scale, float64(t+1)*scale
			for i := int(a); i < n && float64(i) < b; i++ {
				lo, hi := math.Max(a, float64(i)), math.Min(b, float64(i+1))
				if hi > lo {
					out[t] = append(out[t], struct {
						i int
						w float64
					}{i, (hi - lo) / scale})
				}
			}
		}
		return out
	}
	wx, wy := weights(sw, tw), weights(sh, th)
	dst := image.NewRGBA(image.Rect(0, 0, tw, th))
	for ty := 0; ty < th; ty++ {
		for tx := 0; tx < tw; tx++ {
			var acc [3]float64
			for _, yy := range wy[ty] {
				for _, xx := range wx[tx] {
					o := yy.i*src.Stride + xx.i*4
					for c := 0; c < 3; c++ {
						acc[c] += float64(src.Pix[o+c]) * yy.w * xx.w
					}
				}
			}
			o := ty*dst.Stride + tx*4
			for c := 0; c < 3; c++ {
				dst.Pix[o+c] = uint8(math.Round(acc[c]))
			}
			dst.Pix[o+3] = 255
		}
	}
	return dst
}

func psnr(a, b *image.RGBA) float64 {
	var se float64
	n := 0
	for i := 0; i < len(a.Pix); i += 4 {
		for c := 0; c < 3; c++ {
			d := float64(a.Pix[i+c]) - float64(b.Pix[i+c])
			se += d * d
			n++
		}
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255/(se/float64(n)))
}

// TestResizeQuality measures each filter against the exact area average on
// the desktop image (1920x1080 -> 1366x768). Run with -v to see the numbers
// (recorded in scale.go). It fails only if the chosen filter falls behind
// NearestNeighbor, which would mean the measurement is broken.
func TestResizeQuality(t *testing.T) {
	if testing.Short() {
		t.Skip("slow reference downscale")
	}
	img := desktopImage(1920, 1080)
	ref := areaDownscale(img, 1366, 768)
	scores := map[string]float64{}
	for _, f := range resizeFilters {
		got := toRGBA(imaging.Resize(img, 1366, 768, f.f))
		scores[f.name] = psnr(ref, got)
		t.Logf("%-16s PSNR vs area average: %.2f dB", f.name, scores[f.name])
	}
	if scores["Linear"] <= scores["NearestNeighbor"] {
		t.Errorf("Linear %.2f dB not better than NearestNeighbor %.2f dB", scores["Linear"], scores["NearestNeighbor"])
	}
}

func TestEncodeFormats(t *testing.T) {
	img := desktopImage(320, 200)
	b, mt, err := Encode(img, EncodeOptions{})
	if err != nil || mt != "image/png" {
		t.Fatal(mt, err)
	}
	m, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	// Lossless and opaque (no alpha channel: colour type 2).
	if b[25] != 2 {
		t.Errorf("PNG colour type %d, want 2 (RGB)", b[25])
	}
	for y := 0; y < 200; y++ {
		for x := 0; x < 320; x++ {
			r1, g1, b1, _ := m.At(x, y).RGBA()
			r2, g2, b2, _ := img.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				t.Fatalf("PNG pixel %d,%d differs", x, y)
			}
		}
	}
	b, mt, err = Encode(img, EncodeOptions{Format: FormatJPEG, Quality: 90})
	if err != nil || mt != "image/jpeg" {
		t.Fatal(mt, err)
	}
	if _, err := jpeg.Decode(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Encode(img, EncodeOptions{Format: "webp"}); err == nil {
		t.Error("webp accepted")
	}
}
