package vnc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/player"
)

var _ player.Display = (*Client)(nil)

// tapConn records everything read from a connection.
type tapConn struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tapConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	t.mu.Lock()
	t.buf.Write(p[:n])
	t.mu.Unlock()
	return n, err
}

func (t *tapConn) bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Clone(t.buf.Bytes())
}

// readPreamble skips the server's side of an RFB 3.8 handshake with
// security type None: ProtocolVersion, security types, SecurityResult and
// ServerInit. It returns the framebuffer size.
func readPreamble(r io.Reader) (image.Point, error) {
	var ver [12]byte
	if _, err := io.ReadFull(r, ver[:]); err != nil {
		return image.Point{}, fmt.Errorf("version: %w", err)
	}
	if !strings.HasPrefix(string(ver[:]), "RFB 003.") {
		return image.Point{}, fmt.Errorf("version %q", ver)
	}
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return image.Point{}, err
	}
	if _, err := io.CopyN(io.Discard, r, int64(n[0])); err != nil {
		return image.Point{}, err
	}
	var result [4]byte
	if _, err := io.ReadFull(r, result[:]); err != nil {
		return image.Point{}, err
	}
	var si [24]byte // w, h, pixel format, name length
	if _, err := io.ReadFull(r, si[:]); err != nil {
		return image.Point{}, fmt.Errorf("server init: %w", err)
	}
	if _, err := io.CopyN(io.Discard, r, int64(binary.BigEndian.Uint32(si[20:]))); err != nil {
		return image.Point{}, err
	}
	return image.Pt(int(binary.BigEndian.Uint16(si[0:])), int(binary.BigEndian.Uint16(si[2:]))), nil
}

// decodeStream applies every server message in r (after the preamble) to a
// new mirror of size size and returns it with the number of updates that
// answered requests.
func decodeStream(r io.Reader, size image.Point) (*mirror, int, error) {
	conv, err := newConverter(WireFormat)
	if err != nil {
		return nil, 0, err
	}
	m := newMirror(size.X, size.Y)
	var upd Update
	responses := 0
	for {
		var t [1]byte
		if _, err := io.ReadFull(r, t[:]); err == io.EOF {
			return m, responses, nil
		} else if err != nil {
			return m, responses, err
		}
		eff, isUpdate, err := readServerMessage(t[0], r, WireFormat, conv, m, &upd)
		if err != nil {
			return m, responses, err
		}
		if isUpdate && eff.response {
			responses++
		}
	}
}

// goroutinesOf returns the stacks of live goroutines running code of this
// package or go-vnc, other than test code.
func goroutinesOf() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "_test.go") {
			continue // test code: test functions, the fake server
		}
		if strings.Contains(g, "deskfarm/deskfarm/vnc.") || strings.Contains(g, "mitchellh/go-vnc") {
			out = append(out, g)
		}
	}
	return out
}

// checkNoGoroutines fails t if goroutines of this package or go-vnc are
// still alive shortly after the clients under test were closed.
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := goroutinesOf()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left behind:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// imagesEqual reports whether a and b hold the same RGB pixels, and the
// first differing pixel and count of differences if not.
func imagesEqual(a, b *image.RGBA) (bool, string) {
	if a.Rect != b.Rect {
		return false, fmt.Sprintf("bounds %v vs %v", a.Rect, b.Rect)
	}
	n := 0
	var first image.Point
	for y := a.Rect.Min.Y; y < a.Rect.Max.Y; y++ {
		for x := a.Rect.Min.X; x < a.Rect.Max.X; x++ {
			i, j := a.PixOffset(x, y), b.PixOffset(x, y)
			if !bytes.Equal(a.Pix[i:i+3], b.Pix[j:j+3]) {
				if n == 0 {
					first = image.Pt(x, y)
				}
				n++
			}
		}
	}
	if n == 0 {
		return true, ""
	}
	i, j := a.PixOffset(first.X, first.Y), b.PixOffset(first.X, first.Y)
	return false, fmt.Sprintf("%d pixels differ; first at %v: %v vs %v", n, first, a.Pix[i:i+4], b.Pix[j:j+4])
}
