package vnc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	govnc "github.com/mitchellh/go-vnc"
)

// fullFrame returns the largest FramebufferUpdate of the QEMU capture (the
// first full 1280x800 raw frame), type byte included.
func fullFrame(b *testing.B) ([]byte, image.Point) {
	msgs, size := loadCapture(b)
	r := bytes.NewReader(msgs)
	var best []byte
	var u Update
	for r.Len() > 0 {
		start := len(msgs) - r.Len()
		r.ReadByte()
		if err := ReadUpdate(r, WireFormat, size, &u); err != nil {
			b.Fatal(err)
		}
		if m := msgs[start : len(msgs)-r.Len()]; len(m) > len(best) {
			best = m
		}
	}
	if want := 4 + 12 + size.X*size.Y*4; len(best) < want {
		b.Fatalf("largest message %d bytes, want a full frame (%d)", len(best), want)
	}
	return best, size
}

// serveFrames plays an RFB 3.8 server on conn: handshake (None security,
// ServerInit with WireFormat), then msg n times.
func serveFrames(conn net.Conn, size image.Point, msg []byte, n int) {
	defer conn.Close()
	conn.Write([]byte("RFB 003.008\n"))
	var buf [12]byte
	io.ReadFull(conn, buf[:12])
	conn.Write([]byte{1, 1})
	io.ReadFull(conn, buf[:1])
	conn.Write([]byte{0, 0, 0, 0})
	io.ReadFull(conn, buf[:1])
	pf := WireFormat.marshal()
	init := binary.BigEndian.AppendUint16(nil, uint16(size.X))
	init = binary.BigEndian.AppendUint16(init, uint16(size.Y))
	init = append(init, pf[:]...)
	init = binary.BigEndian.AppendUint32(init, 5)
	conn.Write(append(init, "bench"...))
	for range n {
		if _, err := conn.Write(msg); err != nil {
			return
		}
	}
}

// benchMessage is the replacement parser as the client registers it with
// go-vnc, without the request/notify bookkeeping.
type benchMessage struct {
	fb   *mirror
	conv converter
	upd  Update
	done chan struct{}
}

func (m *benchMessage) Type() uint8 { return msgFramebufferUpdate }

func (m *benchMessage) Read(_ *govnc.ClientConn, r io.Reader) (govnc.ServerMessage, error) {
	if _, _, err := readServerMessage(msgFramebufferUpdate, r, WireFormat, m.conv, m.fb, &m.upd); err != nil {
		return nil, err
	}
	m.done <- struct{}{}
	return m, nil
}

// BenchmarkDecodeRaw1280x800 decodes one full raw 1280x800 frame recorded
// from QEMU: go-vnc's stock parser against ours, both through go-vnc's read
// loop over a net.Pipe, and ours alone on a bytes.Reader.
func BenchmarkDecodeRaw1280x800(b *testing.B) {
	msg, size := fullFrame(b)

	b.Run("go-vnc-stock", func(b *testing.B) {
		client, server := net.Pipe()
		go serveFrames(server, size, msg, b.N)
		ch := make(chan govnc.ServerMessage)
		vc, err := govnc.Client(client, &govnc.ClientConfig{ServerMessageCh: ch})
		if err != nil {
			b.Fatal(err)
		}
		defer vc.Close()
		b.SetBytes(int64(len(msg)))
		b.ResetTimer()
		for range b.N {
			m := <-ch
			if u, ok := m.(*govnc.FramebufferUpdateMessage); !ok || len(u.Rectangles) == 0 {
				b.Fatalf("got %T", m)
			}
		}
	})

	b.Run("deskfarm-via-go-vnc", func(b *testing.B) {
		client, server := net.Pipe()
		go serveFrames(server, size, msg, b.N)
		conv, _ := newConverter(WireFormat)
		bm := &benchMessage{fb: newMirror(size.X, size.Y), conv: conv, done: make(chan struct{}, 1)}
		s := &session{raw: client}
		bc := &bufConn{Conn: client, r: bufio.NewReaderSize(client, readBufferSize), s: s, loopDone: make(chan struct{})}
		vc, err := govnc.Client(bc, &govnc.ClientConfig{ServerMessages: []govnc.ServerMessage{bm}})
		if err != nil {
			b.Fatal(err)
		}
		defer vc.Close()
		b.SetBytes(int64(len(msg)))
		b.ResetTimer()
		for range b.N {
			<-bm.done
		}
	})

	b.Run("deskfarm-parser-only", func(b *testing.B) {
		conv, _ := newConverter(WireFormat)
		fb := newMirror(size.X, size.Y)
		var u Update
		r := bytes.NewReader(msg)
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			r.Reset(msg)
			r.ReadByte()
			if err := ReadUpdate(r, WireFormat, size, &u); err != nil {
				b.Fatal(err)
			}
			if i%2 == 1 {
				// Alternate between a black mirror and the frame, so every
				// other iteration converts every pixel and the rest compare.
				clear(fb.img.Pix)
			}
			if _, err := fb.apply(&u, conv); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSnapshot is the cost of Snapshot on a 1280x800 mirror.
func BenchmarkSnapshot(b *testing.B) {
	fb := newMirror(1280, 800)
	p := image.Pt(100, 100)
	b.ReportAllocs()
	for range b.N {
		fb.snapshot(&p)
	}
}

// BenchmarkServerEncode1280x800 is the Server's cost of one full raw frame
// (the capture's last screen) per pixel format: QEMU's x8r8g8b8 (fast
// path), noVNC's RGBX (fast path) and a format with shifts off byte
// boundaries (generic path).
func BenchmarkServerEncode1280x800(b *testing.B) {
	img := loadPNG(b, captureScreen)
	rgbx := PixelFormat{BPP: 32, Depth: 24, TrueColor: true, RedMax: 255, GreenMax: 255, BlueMax: 255, GreenShift: 8, BlueShift: 16}
	odd := PixelFormat{BPP: 32, Depth: 24, TrueColor: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 2, GreenShift: 12, BlueShift: 22}
	for _, f := range []struct {
		name string
		pf   PixelFormat
	}{{"wire", WireFormat}, {"novnc-rgbx", rgbx}, {"generic", odd}} {
		b.Run(f.name, func(b *testing.B) {
			enc, err := newEncoder(f.pf)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 0, len(img.Pix))
			b.SetBytes(int64(len(img.Pix)))
			for range b.N {
				buf = enc.appendRow(buf[:0], img.Pix)
			}
		})
	}
}

// mirrorSource is a FrameSource over a mirror, the Client's framebuffer,
// without the sharing: each Server snapshots and encodes by itself.
type mirrorSource struct{ m *mirror }

func (s mirrorSource) SnapshotRaw() *image.RGBA            { return s.m.snapshot(nil) }
func (s mirrorSource) Damage() (<-chan Damage, func())     { return nil, func() {} }
func (s mirrorSource) FrameVersion() (uint64, image.Point) { return s.m.frameVersion() }
func (s mirrorSource) ReadFrame(f func(*image.RGBA, uint64)) {
	s.m.readFrame(f)
}

// sharedMirrorSource is a mirrorSource whose Servers share full frames, as
// the Client's do.
type sharedMirrorSource struct {
	mirrorSource
	fc *FrameCache
}

func (s sharedMirrorSource) FullFrames() *FrameCache { return s.fc }

// discardConn is a viewer that takes every write at once.
type discardConn struct{}

func (discardConn) Read([]byte) (int, error)         { return 0, io.EOF }
func (discardConn) Write(p []byte) (int, error)      { return len(p), nil }
func (discardConn) Close() error                     { return nil }
func (discardConn) SetReadDeadline(time.Time) error  { return nil }
func (discardConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkServerFullFrames is the Server's cost of N viewers (noVNC's
// RGBX format) each asking for the whole 1920x1080 screen at one new
// version of the source, as when a takeover page and OSWorld's VNC clients
// connect together: each op changes the source, then every viewer's
// Server answers a full-frame request. "copy" is each Server snapshotting
// and encoding the frame itself (the path of a source that does not share);
// "shared" is the FrameCache: one encode per op, the same bytes written N
// times. Writes go to a viewer that takes them at once.
func BenchmarkServerFullFrames(b *testing.B) {
	const w, h = 1920, 1080
	for _, n := range []int{1, 4, 16} {
		for _, mode := range []string{"copy", "shared"} {
			b.Run(fmt.Sprintf("viewers=%d/%s", n, mode), func(b *testing.B) {
				m := newMirror(w, h)
				copy(m.img.Pix, gradient(w, h).Pix)
				var src FrameSource = mirrorSource{m}
				if mode == "shared" {
					src = sharedMirrorSource{mirrorSource{m}, NewFrameCache(mirrorSource{m})}
				}
				srv := &Server{Source: src, Log: slog.New(slog.DiscardHandler)}
				enc, err := newEncoder(novncFormat)
				if err != nil {
					b.Fatal(err)
				}
				conns := make([]*serverConn, n)
				for i := range conns {
					c := &serverConn{srv: srv, conn: discardConn{}, log: srv.Log, writeTimeout: time.Second,
						enc: enc, size: image.Pt(w, h), held: map[uint32]bool{}, wake: make(chan struct{}, 1)}
					if sh, ok := src.(SharedFrameSource); ok {
						c.frames = sh.FullFrames()
					}
					conns[i] = c
				}
				b.SetBytes(int64(n * w * h * 4))
				b.ReportAllocs()
				for i := range b.N {
					m.mu.Lock() // a change: one pixel, a new version
					m.img.Pix[0] = byte(i)
					m.version++
					m.mu.Unlock()
					for _, c := range conns {
						c.mu.Lock()
						c.want, c.damage = true, m.img.Rect
						c.mu.Unlock()
						if err := c.maybeUpdate(); err != nil {
							b.Fatal(err)
						}
					}
				}
				if got := conns[0].stats.Updates; got != b.N {
					b.Fatalf("%d updates for %d ops", got, b.N)
				}
			})
		}
	}
}
