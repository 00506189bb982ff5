package web

// The takeover path: GET /v1/vms/{id}/vnc upgrades to a websocket that
// speaks RFB 3.8 to noVNC. It is an RFB *server* inside deskfarm, fed from
// the VM's shared vnc.Client mirror: viewers never open their own
// connection to QEMU, so every VM keeps exactly one VNC connection.
//
// It sends raw-encoded updates of the damaged region (plus DesktopSize on a
// resize), and forwards KeyEvent and PointerEvent to vnc.Client.Key and
// Pointer only while the connection presents the VM's current control
// token (?control_token=, from POST /v1/vms/{id}/control). Without it the
// connection is read-only whatever the browser does: client messages of
// types 4 (key), 5 (pointer) and 255 (QEMU) are read and dropped (noVNC's
// viewOnly flag is enforced only in the browser).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/vnc"
)

// RFB client message types (RFC 6143 7.5) and encodings.
const (
	rfbSetPixelFormat  = 0
	rfbSetEncodings    = 2
	rfbUpdateRequest   = 3
	rfbKeyEvent        = 4
	rfbPointerEvent    = 5
	rfbClientCutText   = 6
	rfbQEMU            = 255
	rfbEncRaw          = 0
	rfbEncDesktopSize  = -223
	rfbMaxCutText      = 1 << 20
	rfbDesktopName     = "deskfarm"
	proxyMaxRectPixels = 1 << 24
)

// pixelFormat is the part of an RFB PIXEL_FORMAT the proxy honours: 32-bit
// true colour with 8-bit channels at any shifts, either byte order.
type pixelFormat struct {
	bigEndian              bool
	rShift, gShift, bShift uint8
}

// serverPixelFormat is what ServerInit announces: little-endian BGRX.
var serverPixelFormat = pixelFormat{rShift: 16, gShift: 8, bShift: 0}

func (pf pixelFormat) bytes() []byte {
	b := make([]byte, 16)
	b[0], b[1] = 32, 24
	if pf.bigEndian {
		b[2] = 1
	}
	b[3] = 1
	binary.BigEndian.PutUint16(b[4:], 255)
	binary.BigEndian.PutUint16(b[6:], 255)
	binary.BigEndian.PutUint16(b[8:], 255)
	b[10], b[11], b[12] = pf.rShift, pf.gShift, pf.bShift
	return b
}

func parsePixelFormat(b []byte) (pixelFormat, error) {
	pf := pixelFormat{bigEndian: b[2] != 0, rShift: b[10], gShift: b[11], bShift: b[12]}
	if b[0] != 32 || b[3] == 0 || binary.BigEndian.Uint16(b[4:]) != 255 || binary.BigEndian.Uint16(b[6:]) != 255 ||
		binary.BigEndian.Uint16(b[8:]) != 255 || pf.rShift > 24 || pf.gShift > 24 || pf.bShift > 24 {
		return pf, fmt.Errorf("unsupported pixel format % x: only 32 bpp true colour with 8-bit channels", b)
	}
	return pf, nil
}

// wsStream makes a websocket's binary messages one byte stream.
type wsStream struct {
	conn *websocket.Conn
	r    io.Reader
}

func (s *wsStream) Read(p []byte) (int, error) {
	for {
		if s.r == nil {
			_, r, err := s.conn.NextReader()
			if err != nil {
				return 0, err
			}
			s.r = r
		}
		n, err := s.r.Read(p)
		if errors.Is(err, io.EOF) {
			s.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

// rfbConn is one noVNC client of the proxy.
type rfbConn struct {
	s     *server
	id    string
	scr   screen
	conn  *websocket.Conn
	in    io.Reader
	token string // control token presented, "" for read-only

	wmu sync.Mutex // serialises writes

	mu        sync.Mutex
	pf        pixelFormat
	desktopSz bool            // the client takes DesktopSize
	want      bool            // an update request is pending
	wantRect  image.Rectangle // what it asks for
	damage    image.Rectangle // changed since the last update sent
	size      image.Point     // the size the client knows
	wake      chan struct{}
	dropped   int // input messages dropped (read-only)
	forwarded int // input messages forwarded
}

// vncProxy serves GET /v1/vms/{id}/vnc[?control_token=T].
func (s *server) vncProxy(w http.ResponseWriter, r *http.Request) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	id := vmID(r)
	token := r.URL.Query().Get("control_token")
	if token != "" && !s.control.valid(id, token) {
		return &httpError{status: http.StatusForbidden, code: CodeForbidden,
			msg: fmt.Sprintf("vnc of vm %s: the control token is not the current one (take control again)", id)}
	}
	d, err := s.desks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil // Upgrade answered the client
	}
	s.serveRFB(id, clientScreen{d.Display}, conn, token)
	return nil
}

// CodeForbidden is the error code of a control token that is not (or no
// longer) the VM's current one (403).
const CodeForbidden = "forbidden"

// serveRFB runs the RFB server on conn until either side goes away.
func (s *server) serveRFB(id string, scr screen, conn *websocket.Conn, token string) {
	defer conn.Close()
	c := &rfbConn{s: s, id: id, scr: scr, conn: conn, in: &wsStream{conn: conn}, token: token,
		pf: serverPixelFormat, wake: make(chan struct{}, 1)}
	mode := "read-only"
	if token != "" {
		mode = "control"
	}
	start := time.Now()
	s.log.Info("vnc viewer connected", "vm", id, "op", "vnc_proxy", "mode", mode, "remote", conn.RemoteAddr().String())
	err := c.run()
	s.log.Info("vnc viewer disconnected", "vm", id, "op", "vnc_proxy", "mode", mode,
		"duration", time.Since(start).Round(time.Millisecond), "forwarded", c.forwarded, "dropped", c.dropped, "err", err)
}

func (c *rfbConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout)) //nolint:errcheck // fails only on a closed conn
	return c.conn.WriteMessage(websocket.BinaryMessage, b)
}

func (c *rfbConn) run() error {
	img := c.scr.SnapshotRaw()
	c.size = img.Rect.Size()
	if err := c.handshake(c.size); err != nil {
		return fmt.Errorf("rfb handshake for vm %s: %w", c.id, err)
	}
	ch, cancel := c.scr.Damage()
	defer cancel()
	readErr := make(chan error, 1)
	go func() { readErr <- c.readLoop() }()
	for {
		select {
		case err := <-readErr:
			return err
		case d, ok := <-ch:
			if !ok {
				return fmt.Errorf("rfb for vm %s: %w", c.id, vnc.ErrClosed)
			}
			c.mu.Lock()
			c.damage = c.damage.Union(d.Rect)
			c.mu.Unlock()
		case <-c.wake:
		}
		if err := c.maybeUpdate(); err != nil {
			return err
		}
	}
}

func (c *rfbConn) handshake(size image.Point) error {
	if err := c.write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	ver := make([]byte, 12)
	if _, err := io.ReadFull(c.in, ver); err != nil {
		return fmt.Errorf("read client version: %w", err)
	}
	if string(ver[:4]) != "RFB " {
		return fmt.Errorf("bad client version %q", ver)
	}
	// Security: None. Authorisation happened on the HTTP upgrade.
	if err := c.write([]byte{1, 1}); err != nil {
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(c.in, b[:]); err != nil {
		return fmt.Errorf("read security type: %w", err)
	}
	if b[0] != 1 {
		return fmt.Errorf("client chose security type %d, offered 1 (None)", b[0])
	}
	if err := c.write([]byte{0, 0, 0, 0}); err != nil {
		return err
	}
	if _, err := io.ReadFull(c.in, b[:]); err != nil { // ClientInit shared flag
		return fmt.Errorf("read ClientInit: %w", err)
	}
	init := make([]byte, 0, 24+len(rfbDesktopName))
	init = binary.BigEndian.AppendUint16(init, uint16(size.X))
	init = binary.BigEndian.AppendUint16(init, uint16(size.Y))
	init = append(init, serverPixelFormat.bytes()...)
	init = binary.BigEndian.AppendUint32(init, uint32(len(rfbDesktopName)))
	init = append(init, rfbDesktopName...)
	return c.write(init)
}

// readLoop parses client messages until an error.
func (c *rfbConn) readLoop() error {
	var t [1]byte
	for {
		if _, err := io.ReadFull(c.in, t[:]); err != nil {
			return err
		}
		switch t[0] {
		case rfbSetPixelFormat:
			b := make([]byte, 19)
			if _, err := io.ReadFull(c.in, b); err != nil {
				return err
			}
			pf, err := parsePixelFormat(b[3:])
			if err != nil {
				return err
			}
			c.mu.Lock()
			c.pf = pf
			c.mu.Unlock()
		case rfbSetEncodings:
			b := make([]byte, 3)
			if _, err := io.ReadFull(c.in, b); err != nil {
				return err
			}
			n := int(binary.BigEndian.Uint16(b[1:]))
			encs := make([]byte, 4*n)
			if _, err := io.ReadFull(c.in, encs); err != nil {
				return err
			}
			ds := false
			for i := 0; i < n; i++ {
				if int32(binary.BigEndian.Uint32(encs[4*i:])) == rfbEncDesktopSize {
					ds = true
				}
			}
			c.mu.Lock()
			c.desktopSz = ds
			c.mu.Unlock()
		case rfbUpdateRequest:
			b := make([]byte, 9)
			if _, err := io.ReadFull(c.in, b); err != nil {
				return err
			}
			x, y := int(binary.BigEndian.Uint16(b[1:])), int(binary.BigEndian.Uint16(b[3:]))
			w, h := int(binary.BigEndian.Uint16(b[5:])), int(binary.BigEndian.Uint16(b[7:]))
			r := image.Rect(x, y, x+w, y+h)
			c.mu.Lock()
			c.want, c.wantRect = true, r
			if b[0] == 0 { // not incremental: the whole region now
				c.damage = c.damage.Union(r)
			}
			c.mu.Unlock()
			select {
			case c.wake <- struct{}{}:
			default:
			}
		case rfbKeyEvent:
			b := make([]byte, 7)
			if _, err := io.ReadFull(c.in, b); err != nil {
				return err
			}
			if c.mayInput() {
				keysym := binary.BigEndian.Uint32(b[3:])
				if err := c.scr.Key(keysym, 0, b[0] != 0); err != nil {
					c.s.log.Warn("forward key", "vm", c.id, "op", "vnc_proxy", "err", err)
				}
				if b[0] != 0 {
					c.noteKey(keysym)
				}
			}
		case rfbPointerEvent:
			b := make([]byte, 5)
			if _, err := io.ReadFull(c.in, b); err != nil {
				return err
			}
			if c.mayInput() {
				x, y := int(binary.BigEndian.Uint16(b[1:])), int(binary.BigEndian.Uint16(b[3:]))
				if err := c.scr.Pointer(x, y, b[0]); err != nil && !errors.Is(err, vnc.ErrOutOfBounds) {
					c.s.log.Warn("forward pointer", "vm", c.id, "op", "vnc_proxy", "err", err)
				}
				if b[0] != 0 {
					c.noteClick(x, y, b[0])
				}
			}
		case rfbClientCutText:
			b := make([]byte, 7)
			if _, err := io.ReadFull(c.in, b); err != nil {
				return err
			}
			n := int64(binary.BigEndian.Uint32(b[3:]))
			if n > rfbMaxCutText {
				return fmt.Errorf("client cut text of %d bytes exceeds %d", n, rfbMaxCutText)
			}
			if _, err := io.CopyN(io.Discard, c.in, n); err != nil {
				return err
			}
		case rfbQEMU:
			// Only the extended key event (subtype 0, 12 bytes) exists for
			// clients this server announces nothing to; it is never forwarded.
			b := make([]byte, 11)
			if _, err := io.ReadFull(c.in, b); err != nil {
				return err
			}
			if b[0] != 0 {
				return fmt.Errorf("unsupported QEMU client message subtype %d", b[0])
			}
			c.mu.Lock()
			c.dropped++
			c.mu.Unlock()
		default:
			return fmt.Errorf("unsupported client message type %d", t[0])
		}
	}
}

// mayInput reports whether this connection holds the VM's control now, and
// counts the message as forwarded or dropped.
func (c *rfbConn) mayInput() bool {
	ok := c.token != "" && c.s.control.valid(c.id, c.token)
	c.mu.Lock()
	if ok {
		c.forwarded++
	} else {
		c.dropped++
	}
	c.mu.Unlock()
	return ok
}

// noteKey records a key the person pressed, for the live view's overlay.
func (c *rfbConn) noteKey(keysym uint32) {
	ev := ActivityEvent{Time: time.Now(), Source: "human", Kind: "key_down"}
	if keysym >= 0x20 && keysym <= 0x7e {
		ev.Text = string(rune(keysym))
	} else {
		ev.Keys = []string{fmt.Sprintf("keysym 0x%x", keysym)}
	}
	c.s.activity.add(c.id, ev)
}

// noteClick records a button press the person made.
func (c *rfbConn) noteClick(x, y int, mask uint8) {
	x0, y0 := x, y
	c.s.activity.add(c.id, ActivityEvent{Time: time.Now(), Source: "human", Kind: "button_down",
		X: &x0, Y: &y0, Button: buttonName(mask)})
}

func buttonName(mask uint8) string {
	switch {
	case mask&1 != 0:
		return "left"
	case mask&2 != 0:
		return "middle"
	case mask&4 != 0:
		return "right"
	}
	return "wheel"
}

// maybeUpdate sends one FramebufferUpdate if the client asked for one and
// something in its region changed.
func (c *rfbConn) maybeUpdate() error {
	c.mu.Lock()
	if !c.want {
		c.mu.Unlock()
		return nil
	}
	img := c.scr.SnapshotRaw()
	resized := img.Rect.Size() != c.size
	r := c.damage.Intersect(c.wantRect).Intersect(img.Rect)
	if resized {
		if !c.desktopSz {
			c.mu.Unlock()
			return fmt.Errorf("rfb for vm %s: framebuffer resized to %v and the client does not take DesktopSize", c.id, img.Rect.Size())
		}
		c.size, r = img.Rect.Size(), img.Rect
	}
	if r.Empty() && !resized {
		c.mu.Unlock()
		return nil
	}
	if r.Dx()*r.Dy() > proxyMaxRectPixels {
		c.mu.Unlock()
		return fmt.Errorf("rfb for vm %s: update of %v is too large", c.id, r)
	}
	c.want, c.damage = false, image.Rectangle{}
	pf := c.pf
	c.mu.Unlock()

	n := 0
	if resized {
		n++
	}
	if !r.Empty() {
		n++
	}
	msg := make([]byte, 0, 4+12*2+r.Dx()*r.Dy()*4)
	msg = append(msg, 0, 0)
	msg = binary.BigEndian.AppendUint16(msg, uint16(n))
	rect := func(r image.Rectangle, enc int32) {
		msg = binary.BigEndian.AppendUint16(msg, uint16(r.Min.X))
		msg = binary.BigEndian.AppendUint16(msg, uint16(r.Min.Y))
		msg = binary.BigEndian.AppendUint16(msg, uint16(r.Dx()))
		msg = binary.BigEndian.AppendUint16(msg, uint16(r.Dy()))
		msg = binary.BigEndian.AppendUint32(msg, uint32(enc))
	}
	if resized {
		rect(image.Rectangle{Max: img.Rect.Size()}, rfbEncDesktopSize)
	}
	if !r.Empty() {
		rect(r, rfbEncRaw)
		msg = appendRaw(msg, img, r, pf)
	}
	return c.write(msg)
}

// appendRaw appends rect r of img in pixel format pf.
func appendRaw(b []byte, img *image.RGBA, r image.Rectangle, pf pixelFormat) []byte {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		row := img.Pix[img.PixOffset(r.Min.X, y):img.PixOffset(r.Max.X, y)]
		for i := 0; i < len(row); i += 4 {
			v := uint32(row[i])<<pf.rShift | uint32(row[i+1])<<pf.gShift | uint32(row[i+2])<<pf.bShift
			if pf.bigEndian {
				b = binary.BigEndian.AppendUint32(b, v)
			} else {
				b = binary.LittleEndian.AppendUint32(b, v)
			}
		}
	}
	return b
}
