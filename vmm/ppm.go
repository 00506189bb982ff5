package vmm

import (
	"bufio"
	"bytes"
	"fmt"
	"image"
	"io"
	"strconv"
)

// decodePPM decodes the binary PPM (P6, maxval 255) that QEMU's screendump
// and libvirt's virDomainScreenshot return for a VGA display.
func decodePPM(b []byte) (*image.RGBA, error) {
	r := bufio.NewReader(bytes.NewReader(b))
	var hdr [4]int
	magic, err := ppmToken(r)
	if err != nil || magic != "P6" {
		return nil, fmt.Errorf("decode ppm: magic %q, want P6", magic)
	}
	for i := 0; i < 3; i++ {
		tok, err := ppmToken(r)
		if err != nil {
			return nil, fmt.Errorf("decode ppm header: %w", err)
		}
		if hdr[i], err = strconv.Atoi(tok); err != nil || hdr[i] <= 0 {
			return nil, fmt.Errorf("decode ppm header: bad number %q", tok)
		}
	}
	w, h, maxval := hdr[0], hdr[1], hdr[2]
	if maxval != 255 || w > 16384 || h > 16384 {
		return nil, fmt.Errorf("decode ppm: unsupported %dx%d maxval %d", w, h, maxval)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	row := make([]byte, 3*w)
	for y := 0; y < h; y++ {
		if _, err := io.ReadFull(r, row); err != nil {
			return nil, fmt.Errorf("decode ppm row %d: %w", y, err)
		}
		p := img.Pix[y*img.Stride:]
		for x := 0; x < w; x++ {
			p[4*x], p[4*x+1], p[4*x+2], p[4*x+3] = row[3*x], row[3*x+1], row[3*x+2], 0xff
		}
	}
	return img, nil
}

// ppmToken reads one whitespace-separated header token, skipping comments,
// and consumes the single whitespace byte after it.
func ppmToken(r *bufio.Reader) (string, error) {
	var tok []byte
	for {
		c, err := r.ReadByte()
		if err != nil {
			return "", err
		}
		switch {
		case c == '#' && len(tok) == 0:
			if _, err := r.ReadString('\n'); err != nil {
				return "", err
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if len(tok) > 0 {
				return string(tok), nil
			}
		default:
			tok = append(tok, c)
		}
	}
}
