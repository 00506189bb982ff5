package vnc

import "errors"

// Sentinel errors. Callers test them with errors.Is; returned errors wrap
// them with the operation, the VM and the socket.
var (
	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("vnc client closed")
	// ErrDisconnected means there is no live connection right now; the
	// client is reconnecting. Input is not queued for later.
	ErrDisconnected = errors.New("vnc not connected")
	// ErrOutOfBounds means a pointer position lies off the framebuffer.
	ErrOutOfBounds = errors.New("position outside the framebuffer")
	// ErrProtocol means the server sent something this client cannot parse.
	ErrProtocol = errors.New("rfb protocol error")
	// ErrUnsupportedEncoding means the server sent a rectangle in an
	// encoding this client did not advertise.
	ErrUnsupportedEncoding = errors.New("unsupported rfb encoding")
	// ErrUnsupportedPixelFormat means a pixel format this client cannot decode.
	ErrUnsupportedPixelFormat = errors.New("unsupported rfb pixel format")
	// ErrFramebufferTooLarge means a framebuffer side exceeds
	// MaxFramebufferSide: in a ServerInit or DesktopSize the client got, or
	// in the frame source a Server was asked to serve.
	ErrFramebufferTooLarge = errors.New("rfb framebuffer too large")
	// ErrHandshakeTimeout means an RFB client did not finish the handshake
	// within the Server's HandshakeTimeout.
	ErrHandshakeTimeout = errors.New("rfb handshake not finished in time")
	// ErrStale means Settle could not prove the mirror current in time: no
	// fresh update arrived before its max. It reports Timeout() true, so a
	// caller that knows no vnc type (player) can tell a settle that ran out
	// of time from a broken connection.
	ErrStale error = staleError{}
)

type staleError struct{}

func (staleError) Error() string { return "framebuffer not known to be current" }
func (staleError) Timeout() bool { return true }
