package vnc

import (
	"bytes"
	"image"
	"testing"
	"time"
)

// novncFormat is the pixel format noVNC asks for: RGBX, red at bit 0.
var novncFormat = PixelFormat{BPP: 32, Depth: 24, TrueColor: true, RedMax: 255, GreenMax: 255, BlueMax: 255, GreenShift: 8, BlueShift: 16}

// TestServerSharesFullFrames: viewers that ask for the whole screen at one
// version of the source get the bytes of one encode per pixel format, and
// the source is read once per format and never snapshotted; after a change
// and after a resize the next full frames show the new picture at the new
// size; incremental updates stay per connection.
func TestServerSharesFullFrames(t *testing.T) {
	src := newSharedSource(gradient(640, 480))
	formats := []PixelFormat{novncFormat, novncFormat, novncFormat, novncFormat, WireFormat, WireFormat}
	viewers := make([]*rfbClient, len(formats))
	mirrors := make([]*mirror, len(formats))
	var dones []<-chan serveResult
	for i, pf := range formats {
		c, done := newRFBClient(t, &Server{Source: src, Log: quietLogger(t)})
		c.pf = pf
		c.send(appendSetPixelFormat(nil, pf))
		c.send(appendSetEncodings(nil, advertisedEncodings))
		viewers[i], mirrors[i], dones = c, newMirror(c.size.X, c.size.Y), append(dones, done)
	}

	// fullFrames has every viewer ask for the whole screen while the
	// source's ReadFrame is held, so all of them reach the cache before
	// the first encode ends, and checks what each one decodes.
	fullFrames := func(what string) []Update {
		t.Helper()
		reads, snapshots, versions := src.reads.Load(), src.snapshots.Load(), src.versions.Load()
		hold := make(chan struct{})
		src.mu.Lock()
		src.hold = hold
		src.mu.Unlock()
		for _, c := range viewers {
			c.send(appendUpdateRequest(nil, false, image.Rectangle{Max: c.size}))
		}
		// Two calls per request: one to decide, one in the cache.
		for deadline := time.Now().Add(5 * time.Second); src.versions.Load() < versions+int64(2*len(viewers)); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d FrameVersion calls for %d full-frame requests, want 2 each (to decide, then in the cache)", what, src.versions.Load()-versions, len(viewers))
			}
		}
		close(hold)
		want := src.SnapshotRaw()
		snapshots++ // that one
		got := map[PixelFormat][]byte{}
		updates := make([]Update, len(viewers))
		for i, c := range viewers {
			b := c.update(c.pf, &updates[i])
			conv, err := newConverter(c.pf)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mirrors[i].apply(&updates[i], conv); err != nil {
				t.Fatalf("%s: viewer %d: %v", what, i, err)
			}
			c.size = mirrors[i].img.Rect.Size()
			mustMatch(t, mirrors[i].snapshot(nil), want, what)
			if prev, ok := got[c.pf]; ok && !bytes.Equal(prev, b) {
				t.Errorf("%s: viewer %d got other bytes than an earlier viewer in the same format", what, i)
			}
			got[c.pf] = b
		}
		if n := src.reads.Load() - reads; n != 2 {
			t.Errorf("%s: the source was read %d times for %d viewers in 2 formats, want 2 (one per format)", what, n, len(viewers))
		}
		if n := src.snapshots.Load() - snapshots; n != 0 {
			t.Errorf("%s: %d snapshots for full frames, want none", what, n)
		}
		return updates
	}

	fullFrames("first frame")
	src.draw(image.Rect(100, 100, 300, 200), red)
	fullFrames("after a change")
	src.resize(320, 200, green)
	src.draw(image.Rect(0, 0, 10, 10), red)
	for i, u := range fullFrames("after a resize") {
		if len(u.Rects) != 2 || u.Rects[0].Encoding != EncodingDesktopSize || u.Rects[0].Size() != image.Pt(320, 200) ||
			u.Rects[1].Rectangle != image.Rect(0, 0, 320, 200) {
			t.Errorf("viewer %d after the resize: rects %v, want DesktopSize 320x200 and the whole frame", i, u.Rects)
		}
	}

	// Damage is each viewer's own: an incremental request gets the
	// changed region, not the whole screen, encoded for it. (A change
	// whose notification came after the full frame may be sent again.)
	reads := src.reads.Load()
	damaged := image.Rect(30, 40, 50, 45)
	src.draw(damaged, green)
	for i, c := range viewers {
		c.send(appendUpdateRequest(nil, true, image.Rectangle{Max: c.size}))
		var u Update
		c.update(c.pf, &u)
		if len(u.Rects) != 1 || !damaged.In(u.Rects[0].Rectangle) || u.Rects[0].Rectangle == image.Rect(0, 0, 320, 200) {
			t.Errorf("viewer %d: incremental update %v, want one rect around %v", i, u.Rects, damaged)
		}
		conv, _ := newConverter(c.pf)
		if _, err := mirrors[i].apply(&u, conv); err != nil {
			t.Fatal(err)
		}
		mustMatch(t, mirrors[i].snapshot(nil), src.SnapshotRaw(), "after an incremental update")
	}
	if n := src.reads.Load() - reads; n != 0 {
		t.Errorf("incremental updates read %d full frames, want none", n)
	}

	for i, c := range viewers {
		c.conn.Close()
		if r := waitServe(t, dones[i]); r.err != nil || r.stats.Updates != 4 {
			t.Errorf("viewer %d: Serve %+v %v, want 4 updates and no error", i, r.stats, r.err)
		}
	}
	checkNoGoroutines(t)
}

// TestServerSharedFramesFromClient: Servers showing this package's Client
// (as the takeover path does) share its full frames, and their viewers
// follow its changes.
func TestServerSharedFramesFromClient(t *testing.T) {
	qemu := newFakeServer(t, 200, 120)
	qemu.draw(image.Rect(20, 10, 60, 40), red)
	mirror := dialFake(t, qemu)
	srv := &Server{Source: clientSource{mirror}, Log: quietLogger(t)}
	v0, _ := mirror.FrameVersion()
	var viewers []*Client
	for range 3 {
		viewer, _ := dialServer(t, srv)
		mustMatch(t, viewer.SnapshotRaw(), qemu.snapshot(), "first frame")
		viewers = append(viewers, viewer)
	}
	if v, _ := mirror.FrameVersion(); v != v0 {
		t.Fatalf("the mirror changed (version %d to %d) with QEMU's screen unchanged", v0, v)
	}
	if n := mirror.FullFrames().encodes.Load(); n != 1 {
		t.Errorf("%d full frames encoded for 3 viewers of one version, want 1", n)
	}

	qemu.resize(240, 100, green)
	qemu.draw(image.Rect(200, 50, 240, 100), red)
	settle(t, mirror, 0, 5*time.Second)
	for i, viewer := range viewers {
		waitMirror(t, viewer, qemu.snapshot(), "after a resize")
		if w, h := viewer.Size(); w != 240 || h != 100 {
			t.Errorf("viewer %d: size %dx%d after the resize, want 240x100", i, w, h)
		}
	}
}

// TestFrameCacheBounds: the cache keeps one frame per pixel format, at
// most maxSharedFormats, drops a frame of an older version or another
// size, and lets go of frames nobody asks for again.
func TestFrameCacheBounds(t *testing.T) {
	src := newTestSource(gradient(64, 48))
	fc := NewFrameCache(src)
	var encs []encoder
	for i := range maxSharedFormats + 1 {
		pf := novncFormat
		pf.RedShift, pf.BlueShift = uint8(i), 16+uint8(i) // a distinct format each
		enc, err := newEncoder(pf)
		if err != nil {
			t.Fatal(err)
		}
		encs = append(encs, enc)
		if _, err := fc.frame(enc); err != nil {
			t.Fatal(err)
		}
	}
	if n := fc.cached(); n != maxSharedFormats {
		t.Errorf("%d frames cached after %d formats, want %d", n, len(encs), maxSharedFormats)
	}
	last := encs[len(encs)-1]
	f1, _ := fc.frame(last)
	f2, _ := fc.frame(last)
	if f1 != f2 || src.reads.Load() != int64(len(encs)) {
		t.Errorf("the same format at the same version was encoded again (%d reads for %d formats)", src.reads.Load(), len(encs))
	}

	src.draw(image.Rect(0, 0, 4, 4), red)
	f3, _ := fc.frame(last)
	if f3 == f1 || f3.version == f1.version {
		t.Errorf("after a change the cache returned the frame of version %d", f1.version)
	}
	if n := fc.cached(); n != maxSharedFormats {
		t.Errorf("%d frames cached after a change, want %d (the old version replaced)", n, maxSharedFormats)
	}

	src.resize(32, 16, green)
	f4, _ := fc.frame(last)
	if f4.size != image.Pt(32, 16) || fc.cached() != 1 {
		t.Errorf("after a resize: frame %v, %d cached; want 32x16 and only it", f4.size, fc.cached())
	}

	fc.idle = 10 * time.Millisecond
	src.draw(image.Rect(0, 0, 4, 4), green)
	fc.frame(last)
	for deadline := time.Now().Add(5 * time.Second); fc.cached() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames still cached, unused for 5 s", fc.cached())
		}
	}
}
