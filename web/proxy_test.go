package web

import (
	"encoding/binary"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// keyScreen is a fakeScreen that records key presses and releases.
type keyScreen struct {
	*fakeScreen
	mu   sync.Mutex
	keys []string
}

func (k *keyScreen) Key(keysym uint32, _ uint16, down bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	ev := "up"
	if down {
		ev = "down"
	}
	k.keys = append(k.keys, string(rune(keysym))+" "+ev)
	return nil
}

func (k *keyScreen) got() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.keys)
}

func (k *keyScreen) waitKeys(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(k.got(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("keys reaching the display: %q, want %q", k.got(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestProxyAdapter runs the websocket adapter without a VM: the RFB
// handshake over websocket messages, input with a control token, and the
// release of a held key when the token is revoked.
func TestProxyAdapter(t *testing.T) {
	logs := &testLogWriter{t: t}
	s := &server{log: slog.New(slog.NewTextHandler(logs, nil)), activity: newActivity(), control: newControls()}
	g, err := s.control.take("vm1")
	if err != nil {
		t.Fatal(err)
	}
	scr := &keyScreen{fakeScreen: newFakeScreen(32, 24)}
	served := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s.serveRFB(r, "vm1", scr, conn, r.URL.Query().Get("control_token"))
		close(served)
	}))
	defer ts.Close()

	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(ts.URL, "http")+"/?control_token="+g.token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var buf []byte
	read := func(n int) []byte {
		t.Helper()
		for len(buf) < n {
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, b, err := conn.ReadMessage()
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			buf = append(buf, b...)
		}
		out := buf[:n:n]
		buf = buf[n:]
		return out
	}
	send := func(b []byte) {
		t.Helper()
		if err := conn.WriteMessage(websocket.BinaryMessage, b); err != nil {
			t.Fatal(err)
		}
	}
	if v := read(12); string(v) != "RFB 003.008\n" {
		t.Fatalf("version %q", v)
	}
	send([]byte("RFB 003.008\n"))
	read(2)
	send([]byte{1})
	read(4)
	send([]byte{1})
	si := read(24)
	if w, h := binary.BigEndian.Uint16(si), binary.BigEndian.Uint16(si[2:]); w != 32 || h != 24 {
		t.Fatalf("ServerInit %dx%d, want 32x24", w, h)
	}
	read(int(binary.BigEndian.Uint32(si[20:])))

	key := func(keysym uint32, down byte) []byte {
		return binary.BigEndian.AppendUint32([]byte{4, down, 0, 0}, keysym)
	}
	send(key('q', 1))
	scr.waitKeys(t, "q down")
	if ev, ok := s.activity.last("vm1"); !ok || ev.Kind != "key_down" || ev.Text != "q" || ev.Source != "human" {
		t.Errorf("activity after the key: %+v", ev)
	}

	// Control handed back while q is held: the server releases it without
	// waiting for the browser, and drops what the browser sends next.
	s.control.release("vm1")
	scr.waitKeys(t, "q down", "q up")
	send(key('r', 1))

	// A normal close ends the connection cleanly.
	conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("serveRFB did not return after the close")
	}
	if got := scr.got(); !slices.Equal(got, []string{"q down", "q up"}) {
		t.Errorf("keys reaching the display: %q; the key sent after the release must be dropped", got)
	}
	end := logs.line("vnc viewer disconnected")
	for _, want := range []string{"mode=control", "forwarded=1", "dropped=1", "released=1", "err=<nil>"} {
		if !strings.Contains(end, want) {
			t.Errorf("disconnect log %q lacks %s", end, want)
		}
	}
}

// testLogWriter copies logs to the test log and keeps them.
type testLogWriter struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	l := strings.TrimSpace(string(p))
	w.t.Log(l)
	w.mu.Lock()
	w.lines = append(w.lines, l)
	w.mu.Unlock()
	return len(p), nil
}

// line returns the first log line containing s.
func (w *testLogWriter) line(s string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
