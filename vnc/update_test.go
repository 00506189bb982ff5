package vnc

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// Files of the QEMU capture under testdata/; see testdata/README.md.
const (
	captureStream = "qemu-7.2-tiny-1280x800.rfb.gz"
	captureScreen = "qemu-7.2-tiny-1280x800.png"
)

// loadCapture returns QEMU's side of a recorded connection (see
// testdata/README.md), after the handshake, and the framebuffer size.
func loadCapture(t testing.TB) ([]byte, image.Point) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", captureStream))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(stream)
	size, err := readPreamble(r)
	if err != nil {
		t.Fatalf("capture preamble: %v", err)
	}
	return stream[len(stream)-r.Len():], size
}

func loadPNG(t testing.TB, name string) *image.RGBA {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	rgba := image.NewRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Rect, img, img.Bounds().Min, draw.Src)
	return rgba
}

// TestReadUpdateQEMUCapture decodes a real QEMU 7.2 stream and compares the
// result with the screen it was recorded against.
func TestReadUpdateQEMUCapture(t *testing.T) {
	msgs, size := loadCapture(t)
	if size != image.Pt(1280, 800) {
		t.Fatalf("capture framebuffer %v, want 1280x800", size)
	}
	m, responses, err := decodeStream(bytes.NewReader(msgs), size)
	if err != nil {
		t.Fatalf("decode capture: %v", err)
	}
	if responses < 7 { // the first frame and the update after each of six clicks, at least
		t.Errorf("%d update responses in the capture, want at least 7", responses)
	}
	want := loadPNG(t, captureScreen)
	if ok, diff := imagesEqual(m.snapshot(nil), want); !ok {
		t.Fatalf("decoded capture differs from the recorded screen: %s", diff)
	}

	// Message by message: QEMU acknowledges the extended key event before
	// anything else, then answers the first request with one full frame.
	r := bytes.NewReader(msgs)
	var u Update
	counts := map[string]int{}
	for i := 0; r.Len() > 0; i++ {
		typ, _ := r.ReadByte()
		if typ != msgFramebufferUpdate {
			t.Fatalf("message %d has type %d; QEMU sent only framebuffer updates here", i, typ)
		}
		if err := ReadUpdate(r, WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		switch {
		case i == 0 && (len(u.Rects) != 1 || u.Rects[0].Encoding != EncodingQEMUExtendedKeyEvent):
			t.Errorf("message 0: %d rects, first %s; want the extended key event acknowledgement", len(u.Rects), encodingName(u.Rects[0].Encoding))
		case i == 1 && (len(u.Rects) != 1 || u.Rects[0].Rectangle != image.Rect(0, 0, 1280, 800)):
			t.Errorf("message 1: %d rects; want one full 1280x800 raw frame", len(u.Rects))
		}
		for _, rc := range u.Rects {
			counts[encodingName(rc.Encoding)]++
		}
		counts["messages"]++
	}
	t.Logf("capture: %v, %d update responses", counts, responses)
}

// rectHeader encodes a FramebufferUpdate rectangle header.
func rectHeader(x, y, w, h int, enc int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(x))
	b = binary.BigEndian.AppendUint16(b, uint16(y))
	b = binary.BigEndian.AppendUint16(b, uint16(w))
	b = binary.BigEndian.AppendUint16(b, uint16(h))
	return binary.BigEndian.AppendUint32(b, uint32(enc))
}

// updateBody builds a FramebufferUpdate body (without the type byte).
func updateBody(rects ...[]byte) []byte {
	b := []byte{0}
	b = binary.BigEndian.AppendUint16(b, uint16(len(rects)))
	for _, r := range rects {
		b = append(b, r...)
	}
	return b
}

// wirePixels encodes c as n WireFormat pixels (B, G, R, X).
func wirePixels(n int, c [3]byte) []byte {
	b := make([]byte, 0, 4*n)
	for range n {
		b = append(b, c[2], c[1], c[0], 0)
	}
	return b
}

func rawRect(x, y, w, h int, c [3]byte) []byte {
	return append(rectHeader(x, y, w, h, EncodingRaw), wirePixels(w*h, c)...)
}

func TestReadUpdateEdgeCases(t *testing.T) {
	red, blue := [3]byte{0xff, 0, 0}, [3]byte{0, 0, 0xff}
	conv, _ := newConverter(WireFormat)
	size := image.Pt(64, 48)

	t.Run("raw", func(t *testing.T) {
		m := newMirror(size.X, size.Y)
		var u Update
		body := updateBody(rawRect(2, 3, 4, 5, red), rawRect(0, 0, 1, 1, blue))
		if err := ReadUpdate(bytes.NewReader(body), WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		if !u.IsResponse() || len(u.Rects) != 2 {
			t.Fatalf("rects %d response %v", len(u.Rects), u.IsResponse())
		}
		eff, err := m.apply(&u, conv)
		if err != nil {
			t.Fatal(err)
		}
		if want := image.Rect(0, 0, 6, 8); eff.Rect != want {
			t.Errorf("damage %v, want %v", eff.Rect, want)
		}
		img := m.snapshot(nil)
		if got := img.RGBAAt(2, 3); got.R != 0xff || got.B != 0 || got.A != 0xff {
			t.Errorf("pixel (2,3) = %v, want opaque red", got)
		}
		if got := img.RGBAAt(0, 0); got.B != 0xff || got.R != 0 {
			t.Errorf("pixel (0,0) = %v, want blue", got)
		}
		// The same update again changes nothing.
		if err := ReadUpdate(bytes.NewReader(body), WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		if eff, _ := m.apply(&u, conv); !eff.Empty() {
			t.Errorf("repeated update reported damage %+v", eff.Damage)
		}
	})

	t.Run("desktop size", func(t *testing.T) {
		m := newMirror(size.X, size.Y)
		var u Update
		// The raw rect after the resize is checked against the new size.
		body := updateBody(rectHeader(0, 0, 100, 80, EncodingDesktopSize), rawRect(90, 70, 10, 10, red))
		if err := ReadUpdate(bytes.NewReader(body), WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		eff, err := m.apply(&u, conv)
		if err != nil {
			t.Fatal(err)
		}
		if !eff.Resized || m.size() != image.Pt(100, 80) {
			t.Fatalf("resized %v size %v", eff.Resized, m.size())
		}
		if got := m.snapshot(nil).RGBAAt(99, 79); got.R != 0xff {
			t.Errorf("pixel (99,79) = %v, want red", got)
		}
		if got := m.snapshot(nil).RGBAAt(0, 0); got != (color.RGBA{0, 0, 0, 0xff}) {
			t.Errorf("new framebuffer pixel (0,0) = %v, want opaque black", got)
		}
		// DesktopSize alone is not a response to a request.
		if err := ReadUpdate(bytes.NewReader(updateBody(rectHeader(0, 0, 64, 48, EncodingDesktopSize))), WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		if u.IsResponse() {
			t.Error("DesktopSize-only update counted as a response")
		}
	})

	t.Run("cursor", func(t *testing.T) {
		m := newMirror(size.X, size.Y)
		var u Update
		// 9x2 cursor, hotspot (4,1): row 0 fully opaque, row 1 only x=8.
		c := rectHeader(4, 1, 9, 2, EncodingCursor)
		c = append(c, wirePixels(18, blue)...)
		c = append(c, 0xff, 0x80, 0x00, 0x80)
		if err := ReadUpdate(bytes.NewReader(updateBody(c)), WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		if u.IsResponse() {
			t.Error("cursor-only update counted as a response")
		}
		eff, err := m.apply(&u, conv)
		if err != nil || !eff.Cursor {
			t.Fatalf("apply: %v, cursor %v", err, eff.Cursor)
		}
		p := image.Pt(10, 10)
		img := m.snapshot(&p)
		for x := 6; x < 15; x++ {
			if got := img.RGBAAt(x, 9); got.B != 0xff {
				t.Errorf("cursor row 0 at (%d,9) = %v, want blue", x, got)
			}
		}
		if got := img.RGBAAt(6, 10); got.B == 0xff {
			t.Errorf("transparent cursor pixel drawn at (6,10)")
		}
		if got := img.RGBAAt(14, 10); got.B != 0xff {
			t.Errorf("cursor (8,1) at (14,10) = %v, want blue", got)
		}
		if raw := m.snapshot(nil); raw.RGBAAt(6, 9).B != 0 {
			t.Errorf("raw snapshot shows the cursor")
		}
		// A cursor partly off screen is clipped, not a panic.
		p = image.Pt(0, 0)
		m.snapshot(&p)
		p = image.Pt(63, 47)
		m.snapshot(&p)
	})

	t.Run("ext key ack and empty update", func(t *testing.T) {
		var u Update
		if err := ReadUpdate(bytes.NewReader(updateBody(rectHeader(0, 0, 64, 48, EncodingQEMUExtendedKeyEvent))), WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		m := newMirror(size.X, size.Y)
		if eff, _ := m.apply(&u, conv); !eff.extKey || eff.response {
			t.Errorf("ext key ack: extKey %v response %v", eff.extKey, eff.response)
		}
		if err := ReadUpdate(bytes.NewReader(updateBody()), WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		if !u.IsResponse() {
			t.Error("an update with no rectangles answers a request")
		}
	})

	errCases := []struct {
		name string
		body []byte
		want error
	}{
		{"unknown encoding", updateBody(rectHeader(0, 0, 4, 4, EncodingZRLE)), ErrUnsupportedEncoding},
		{"unadvertised pseudo-encoding", updateBody(rectHeader(0, 0, 0, 0, EncodingLEDState)), ErrUnsupportedEncoding},
		{"encoding nobody knows", updateBody(rectHeader(0, 0, 1, 1, 12345)), ErrUnsupportedEncoding},
		{"raw outside framebuffer", updateBody(rawRect(60, 0, 5, 1, red)), ErrProtocol},
		{"zero desktop size", updateBody(rectHeader(0, 0, 0, 10, EncodingDesktopSize)), ErrProtocol},
		{"desktop size beyond the limit", updateBody(rectHeader(0, 0, 10, MaxFramebufferSide+1, EncodingDesktopSize)), ErrFramebufferTooLarge},
		{"huge cursor", updateBody(rectHeader(0, 0, 4096, 4096, EncodingCursor)), ErrProtocol},
		{"empty stream", nil, io.ErrUnexpectedEOF},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			var u Update
			err := ReadUpdate(bytes.NewReader(tc.body), WireFormat, size, &u)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			t.Logf("%v", err)
		})
	}

	t.Run("truncated", func(t *testing.T) {
		c := rectHeader(1, 1, 3, 2, EncodingCursor)
		c = append(c, wirePixels(6, blue)...)
		c = append(c, 0xe0, 0xe0)
		full := updateBody(rawRect(1, 2, 3, 4, red), rectHeader(0, 0, 64, 48, EncodingDesktopSize), c)
		var u Update
		if err := ReadUpdate(bytes.NewReader(full), WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < len(full); n++ {
			err := ReadUpdate(bytes.NewReader(full[:n]), WireFormat, size, &u)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("first %d of %d bytes: err %v, want unexpected EOF", n, len(full), err)
			}
		}
	})

	t.Run("unsupported pixel format", func(t *testing.T) {
		pf := WireFormat
		pf.BPP = 24
		var u Update
		if err := ReadUpdate(bytes.NewReader(updateBody()), pf, size, &u); !errors.Is(err, ErrUnsupportedPixelFormat) {
			t.Errorf("24 bpp: %v", err)
		}
		pf = WireFormat
		pf.RedShift = 4
		if _, err := newConverter(pf); !errors.Is(err, ErrUnsupportedPixelFormat) {
			t.Errorf("red shift 4: %v", err)
		}
	})
}

// TestConverters checks the fast paths against the generic one.
func TestConverters(t *testing.T) {
	src := make([]byte, 4*64)
	for i := range src {
		src[i] = byte(i*37 + 11)
	}
	formats := map[string]PixelFormat{"bgrx": WireFormat}
	rgbx := WireFormat
	rgbx.RedShift, rgbx.BlueShift = 0, 16
	formats["rgbx"] = rgbx
	be := WireFormat
	be.BigEndian = true // X, R, G, B in memory
	formats["xrgb big-endian"] = be
	for name, pf := range formats {
		c, err := newConverter(pf)
		if err != nil {
			t.Fatal(err)
		}
		g := c
		g.kind = convGeneric
		fast, slow := make([]byte, len(src)), make([]byte, len(src))
		if !c.row(fast, src) || !g.row(slow, src) {
			t.Errorf("%s: no change reported on a fresh row", name)
		}
		if !bytes.Equal(fast, slow) {
			t.Errorf("%s: fast path %v, generic %v", name, fast[:8], slow[:8])
		}
		if c.row(fast, src) {
			t.Errorf("%s: change reported converting the same row twice", name)
		}
	}
	c, _ := newConverter(be)
	dst := make([]byte, 4)
	c.row(dst, []byte{0, 1, 2, 3})
	if !bytes.Equal(dst, []byte{1, 2, 3, 0xff}) {
		t.Errorf("big-endian x8r8g8b8 {0,1,2,3} -> %v, want [1 2 3 255]", dst)
	}
}

func FuzzReadUpdate(f *testing.F) {
	msgs, size := loadCapture(f)
	// Seeds: each message of the capture (bodies), and hand-made edge cases.
	r := bytes.NewReader(msgs)
	var u Update
	for r.Len() > 0 {
		start := len(msgs) - r.Len()
		r.ReadByte()
		if err := ReadUpdate(r, WireFormat, size, &u); err != nil {
			f.Fatal(err)
		}
		body := msgs[start+1 : len(msgs)-r.Len()]
		f.Add(uint16(size.X), uint16(size.Y), body)
	}
	c := rectHeader(3, 3, 9, 2, EncodingCursor)
	c = append(c, wirePixels(18, [3]byte{1, 2, 3})...)
	c = append(c, 0xff, 0x80, 0x00, 0x80)
	f.Add(uint16(64), uint16(48), updateBody(c, rectHeader(0, 0, 32, 16, EncodingDesktopSize), rawRect(30, 15, 2, 1, [3]byte{9, 9, 9})))
	f.Add(uint16(64), uint16(48), updateBody(rectHeader(0, 0, 0, 0, EncodingQEMUExtendedKeyEvent)))
	f.Add(uint16(64), uint16(48), updateBody(rectHeader(0, 0, 1, 1, EncodingTight)))
	conv, _ := newConverter(WireFormat)
	f.Fuzz(func(t *testing.T, w, h uint16, body []byte) {
		// Framebuffers up to QEMU's usual 1280x800.
		fsize := image.Pt(int(w)%1280+1, int(h)%800+1)
		var u Update
		err := ReadUpdate(bytes.NewReader(body), WireFormat, fsize, &u)
		if err != nil {
			return
		}
		m := newMirror(fsize.X, fsize.Y)
		if _, err := m.apply(&u, conv); err != nil {
			t.Fatalf("parsed update does not apply: %v", err)
		}
		p := image.Pt(1, 1)
		m.snapshot(&p)
	})
}
