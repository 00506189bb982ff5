package atspi

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
)

func TestPeerPath(t *testing.T) {
	for addr, want := range map[string]string{
		"unix:path=/run/user/1000/at-spi2-Y9MRZ3/socket":       "/run/user/1000/at-spi2-Y9MRZ3/socket", // at-spi2-core 2.46, the osworld image
		"unix:path=/home/u/.cache/at-spi2-socket-18040":        "/home/u/.cache/at-spi2-socket-18040",  // the host's, without XDG_RUNTIME_DIR
		"unix:path=/run/user/1000/bus":                         "",
		"unix:path=/run/user/1000/at-spi2-X/../bus":            "",
		"unix:path=relative/at-spi2-X/socket":                  "",
		"unix:abstract=/tmp/at-spi2-X/socket":                  "",
		"tcp:host=10.0.0.1,port=1":                             "",
		"unix:path=/tmp/at-spi2-X/socket,guid=0123":            "",
		"unix:path=/tmp/at-spi2-X/socket;unix:path=/run/bus":   "",
		"unix:path=/run/user/1000/at-spi2-X/socket%2f..%2fbus": "",
	} {
		got, err := peerPath(addr)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("peerPath(%q) = %q, %v; want %q", addr, got, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "accepted are") {
			t.Errorf("peerPath(%q): %v does not say what is accepted", addr, err)
		}
	}
}

// relayEnd is the relay's side of a port: frames in and out.
type relayEnd struct{ c net.Conn }

func (r relayEnd) send(t *testing.T, kind byte, id uint32, p string) {
	t.Helper()
	if err := r.write(kind, id, p); err != nil {
		t.Fatal(err)
	}
}

func (r relayEnd) write(kind byte, id uint32, p string) error {
	var h [frameHead]byte
	h[0] = kind
	binary.BigEndian.PutUint32(h[1:], id)
	binary.BigEndian.PutUint32(h[5:], uint32(len(p)))
	_, err := r.c.Write(append(h[:], p...))
	return err
}

func (r relayEnd) recv(t *testing.T) (byte, uint32, string) {
	t.Helper()
	var h [frameHead]byte
	if _, err := io.ReadFull(r.c, h[:]); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, binary.BigEndian.Uint32(h[5:]))
	if _, err := io.ReadFull(r.c, p); err != nil {
		t.Fatal(err)
	}
	return h[0], binary.BigEndian.Uint32(h[1:]), string(p)
}

// The mux's frames: each channel's bytes reach only it, the relay's
// refusal to open a socket is the channel's error, and a frame past the
// bound fails every channel rather than being read.
func TestMux(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	r := relayEnd{guest}
	m, bus := newMux(host)

	go func() { _, _ = bus.Write([]byte("AUTH")) }()
	if k, id, p := r.recv(t); k != frameData || id != 0 || p != "AUTH" {
		t.Fatalf("bus write framed as %c %d %q", k, id, p)
	}
	var app, refused *muxChan
	done := make(chan error, 2)
	go func() {
		var err error
		app, err = m.open("/run/user/1000/at-spi2-A/socket")
		done <- err
	}()
	if k, id, p := r.recv(t); k != frameOpen || id != 1 || p != "/run/user/1000/at-spi2-A/socket" {
		t.Fatalf("open framed as %c %d %q", k, id, p)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() {
		var err error
		refused, err = m.open("/run/user/1000/at-spi2-B/socket")
		done <- err
	}()
	if k, id, _ := r.recv(t); k != frameOpen || id != 2 {
		t.Fatalf("second open framed as %c %d", k, id)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A channel's bytes are handed over as its reader takes them (godbus
	// reads each connection all the time).
	buf := make([]byte, 64)
	go func() { _ = r.write(frameData, 1, "to app") }()
	if n, err := app.Read(buf); err != nil || string(buf[:n]) != "to app" {
		t.Errorf("app channel read %q, %v", buf[:n], err)
	}
	go func() { _ = r.write(frameData, 0, "to bus") }()
	if n, err := bus.Read(buf); err != nil || string(buf[:n]) != "to bus" {
		t.Errorf("bus channel read %q, %v", buf[:n], err)
	}
	r.send(t, frameClose, 2, "open /run/user/1000/at-spi2-B/socket: not a socket of uid 1000")
	if _, err := refused.Read(buf); err == nil || !strings.Contains(err.Error(), "not a socket of uid 1000") {
		t.Errorf("refused channel: %v, want the relay's reason", err)
	}

	go func() { _ = app.Close() }()
	if k, id, _ := r.recv(t); k != frameClose || id != 1 {
		t.Fatalf("close framed as %c %d", k, id)
	}
	r.send(t, frameData, 1, "late") // for a channel closed here: dropped

	var h [frameHead]byte
	h[0] = frameData
	binary.BigEndian.PutUint32(h[5:], maxFrame+1)
	if _, err := guest.Write(h[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.Read(buf); err == nil || !strings.Contains(err.Error(), "a frame of 1048577 bytes") {
		t.Errorf("bus after an oversized frame: %v", err)
	}
	if _, err := m.open("/tmp/at-spi2-C/socket"); err == nil {
		t.Error("open after the port failed: no error")
	}
}
