package player

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"sync"

	"github.com/deskfarm/deskfarm/actions"
)

// ImageFormat is how screenshots are encoded.
type ImageFormat string

// Image formats.
const (
	// FormatPNG is lossless PNG at png.BestSpeed (the default).
	FormatPNG ImageFormat = "png"
	// FormatJPEG is baseline JPEG at a quality (default DefaultJPEGQuality).
	FormatJPEG ImageFormat = "jpeg"
)

// DefaultJPEGQuality is the JPEG quality used when none is given.
const DefaultJPEGQuality = 75

// Encoding cost, measured with
//
//	go test -run '^$' -bench 'Encode|Resize|Screenshot' -benchtime 15x -count 4 ./actions/
//
// (encode_test.go) on a synthetic 1280x800 desktop (flat panels, window
// chrome, dense small glyphs, an icon grid, a photo-like patch), go1.26 on
// the 2-core build machine while other sessions' TCG guests kept its load
// average at 5-9; fastest of 4 runs, so read them as upper bounds (anchors.md
// measured 51/16/15 ms for the first three on a quiet machine):
//
//	PNG default compression         72 ms   253 KiB
//	PNG BestSpeed                   27 ms   287 KiB  (pooled encoder buffers; 31 ms without)
//	JPEG q75 from *image.RGBA       22 ms   253 KiB
//	JPEG q75 from *image.NRGBA      36 ms   (why Scaler returns RGBA)
//
// Scaled screenshots cost more to compress: resampling turns 1-px glyph
// strokes into grey ramps. A 1920x1080 desktop scaled to 1366x768 with the
// Linear filter encodes (PNG BestSpeed) in 49 ms to 872 KiB, against 31 ms
// and 296 KiB for an unscaled 1366x768 frame (BenchmarkEncodeScaled); the
// whole auto-size path, resize + encode, takes 92 ms as PNG and 73 ms as
// JPEG q75 (BenchmarkScreenshot). Resize filters are compared in scale.go.
//
// PNG at BestSpeed is 2.5x faster than the default level for 14% more bytes
// and stays lossless, so the text the model reads is exact: it is the
// default. JPEG is for callers that care more about bytes on the wire.

// EncodeOptions selects the encoding.
type EncodeOptions struct {
	Format  ImageFormat // "" means png
	Quality int         // JPEG quality 1-100; 0 means DefaultJPEGQuality
}

// Validate checks the options.
func (o EncodeOptions) Validate() error {
	switch o.Format {
	case "", FormatPNG, FormatJPEG:
	default:
		return actions.Invalid("format", nil, fmt.Sprintf("must be png or jpeg, got %q", o.Format))
	}
	if o.Quality < 0 || o.Quality > 100 {
		return actions.Invalid("jpeg_quality", nil, fmt.Sprintf("must be 1 to 100 (0 means %d), got %d", DefaultJPEGQuality, o.Quality))
	}
	return nil
}

// pngEncoder is shared so its compressor buffers are reused between
// screenshots.
var pngEncoder = png.Encoder{CompressionLevel: png.BestSpeed, BufferPool: &pngPool{}}

type pngPool struct{ p sync.Pool }

// Get returns a pooled encoder buffer or nil.
func (p *pngPool) Get() *png.EncoderBuffer {
	b, _ := p.p.Get().(*png.EncoderBuffer)
	return b
}

// Put returns a buffer to the pool.
func (p *pngPool) Put(b *png.EncoderBuffer) { p.p.Put(b) }

// Encode encodes img and returns the bytes and their media type
// ("image/png" or "image/jpeg"). Pass *image.RGBA for speed: both encoders
// have fast paths for it.
func Encode(img image.Image, opts EncodeOptions) ([]byte, string, error) {
	if err := opts.Validate(); err != nil {
		return nil, "", err
	}
	var buf bytes.Buffer
	buf.Grow(img.Bounds().Dx() * img.Bounds().Dy() / 2)
	switch opts.Format {
	case FormatJPEG:
		q := opts.Quality
		if q == 0 {
			q = DefaultJPEGQuality
		}
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: q}); err != nil {
			return nil, "", fmt.Errorf("encode jpeg: %w", err)
		}
		return buf.Bytes(), "image/jpeg", nil
	default:
		if err := pngEncoder.Encode(&buf, img); err != nil {
			return nil, "", fmt.Errorf("encode png: %w", err)
		}
		return buf.Bytes(), "image/png", nil
	}
}

// Image is an encoded screenshot or zoom, as returned in a Result.
type Image struct {
	MediaType string `json:"media_type"` // "image/png" or "image/jpeg"
	Data      string `json:"data"`       // standard base64 of the encoded bytes
	Width     int    `json:"width"`
	Height    int    `json:"height"`
}

// encodeImage encodes img into an Image.
func encodeImage(img *image.RGBA, opts EncodeOptions) (*Image, error) {
	b, mt, err := Encode(img, opts)
	if err != nil {
		return nil, err
	}
	return &Image{
		MediaType: mt,
		Data:      base64.StdEncoding.EncodeToString(b),
		Width:     img.Rect.Dx(),
		Height:    img.Rect.Dy(),
	}, nil
}
