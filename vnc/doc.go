// Package vnc owns both sides of RFB (the VNC protocol, RFC 6143) in
// deskfarm:
//
//   - [Client] is the one RFB client per VM: a live mirror of the guest
//     framebuffer and the input path into the guest. It implements
//     player.Display.
//   - [Server] is the RFB server of the takeover path: web hands it a
//     viewer's websocket (noVNC) and it shows the Client's mirror and
//     passes input back, so every VM keeps exactly one connection to QEMU
//     however many people watch.
//
// Both share one set of message builders and parsers (messages.go,
// update.go), one [PixelFormat] with its converters and encoders
// (pixel.go), and one framebuffer limit, [MaxFramebufferSide].
//
// # Transport
//
// Each VM's QEMU serves VNC on a unix socket
// (<graphics type='vnc'><listen type='socket'/>), without authentication.
// The RFB handshake and the read loop are github.com/mitchellh/go-vnc's; the
// rest is ours, because of what go-vnc gets wrong for this use:
//
//   - Its raw decoder reads one field per pixel: 0.3 to 1 s for a 1280x800
//     frame, against about 2 ms here (BenchmarkDecodeRaw1280x800). A custom ServerMessage with Type()==0 in
//     ClientConfig.ServerMessages replaces its whole FramebufferUpdate parser;
//     we register handlers for all 256 message types, so go-vnc only reads the
//     type byte and calls us. [ReadUpdate] reads each rectangle's pixels with
//     a few large io.ReadFull calls (1 MiB chunks) from a bufio.Reader that
//     sits under go-vnc: the net.Conn handed to go-vnc is wrapped so its Read
//     goes through the buffer (go-vnc reads the connection directly).
//   - Its writers (KeyEvent in particular) write one field per call, and its
//     SetPixelFormat does not update the format it decodes with. All client
//     messages are ours: each is built in full and written with one Write
//     under one mutex, with a write deadline.
//   - Its main loop exits silently on any error and never closes its message
//     channel. We leave that channel nil, record every read and parse error
//     ourselves, and learn that the loop ended from the Close it calls on our
//     connection wrapper; the client then reconnects with backoff (a
//     restarted QEMU drops VNC clients; loadvm does not).
//
// # Pixel format and encodings
//
// The client sets 32 bpp little-endian true colour with red at bit 16, green
// at 8 and blue at 0: QEMU's own surface format (x8r8g8b8), for which QEMU
// copies rows with memcpy instead of converting each pixel on its side
// (vnc_write_pixels_copy in ui/vnc.c). We swizzle to RGBA while copying into
// the mirror.
//
// Advertised encodings, in order: Raw (0), DesktopSize (-223: the mirror is
// reallocated; QEMU marks the new framebuffer dirty, so the pending request
// brings all of it), Cursor (-239: image, mask and
// hotspot are kept and [Client.Snapshot] composites them at the last pointer
// position, since QEMU does not draw a hardware cursor into the framebuffer),
// and QEMU ExtendedKeyEvent (-258: once QEMU acknowledges it with a
// pseudo-rectangle, keys with a scancode go as QEMU extended key events).
// No compressed encoding is advertised: over a local unix socket raw is the
// fastest end to end. QEMU's raw path is a memcpy per row, a full frame is
// 4 MB and decodes in a few ms here, while ZRLE or Tight would spend CPU in
// QEMU's VNC worker, competing with the TCG vCPU threads on a 2-core host,
// and more again in our decoder. PointerTypeChange (-257) and LED state
// (-261) are not advertised: the VM's virtio tablet makes QEMU's pointer
// absolute from the start, and advertising LED state turns off QEMU's
// lock-key sync, which the guests' keyboard models rely on. A rectangle of
// any encoding we did not advertise ends the connection with an error that
// names the encoding ([ErrUnsupportedEncoding]); it never hangs.
//
// # Freshness: one request in flight, counted
//
// QEMU sends an update only in answer to a FramebufferUpdateRequest, at a
// tick of its refresh timer; the timer backs off to 3 s while the guest is
// idle, and only client messages of type > 3 (key, pointer, cut text, QEMU)
// reset it to 30 ms (protocol_client_msg in ui/vnc.c). An incremental request
// is answered only once something changed, and two requests QEMU holds at
// one tick are answered by one update, so a client that fires extra requests
// cannot tell which update answers which.
//
// So the client keeps exactly one request in flight. The first asks for the
// whole framebuffer; each later one, sent as soon as the previous answer has
// been applied, is non-incremental for pixel (0,0). QEMU answers that at its
// next tick with everything that changed plus the one pixel (vnc_update_client
// sends the whole dirty map; a forced update always has a rectangle), so it
// works as an incremental request that is always answered: every request gets
// exactly one answer, and the k-th update carrying pixels on a connection
// answers our k-th request and was generated after QEMU processed it. An idle
// guest costs one 80-byte update per refresh tick (3 s). This deviates from
// the usual "incremental request after each update" on purpose; it relies on
// QEMU sending every dirty region with a forced update, which other RFB
// servers need not do. Updates carrying only pseudo-rectangles (cursor,
// resize, the extended key event acknowledgement) are written by QEMU outside
// this cycle and are not counted.
//
// [Client.Settle] sets a fence: it writes a wake-up (a KeyEvent releasing a
// key this client does not hold: QEMU's keyboard state drops the release, so
// the guest sees nothing, but the refresh timer is reset) and waits for the
// answer to the next request the reader sends, which QEMU processes after
// everything written before Settle was called. While a fence is pending the
// reader sends a wake-up with each request, so a fence takes one or two
// 30 ms ticks instead of up to two 3 s ones. An update job QEMU aborts on a
// display switch puts its request back (vnc_abort_display_jobs), so no answer
// is lost; if one ever were, Settle sends an extra request after 5 s.
//
// After the first fence, Settle waits until a later fence shows that nothing
// changed for the quiet period, sleeping in between rather than polling.
//
// # Input
//
// [Client.Pointer] sends absolute PointerEvents and never clamps: a position
// off the framebuffer is an error. [Client.Key] sends QEMU's extended key
// event (type 255, submessage 0) when QEMU offered it and a scancode is
// given. QEMU's keycode there is its "key number": the XT set-1 make code,
// with 0x80 added for 0xE0-prefixed keys (Right Ctrl 0xE01D is 0x9D, Up
// 0xE048 is 0xC8; see qemu_input_key_number_to_qcode and the keycodes
// do_key_event tests in ui/vnc.c). Scancodes that cannot be expressed that
// way fall back to a plain KeyEvent with the keysym.
//
// # Pointer position
//
// [Client.CursorPos] is where this client last sent the pointer, or (-1, -1)
// before its first pointer event: the guest's pointer position cannot be read
// over RFB. Until then [Client.Snapshot] draws no cursor.
//
// # Lifetime
//
// [Dial] returns once the first full frame is in the mirror. The client then
// reconnects by itself, with backoff, for as long as it lives; whoever
// destroys the VM closes it. [Client.Err] reports whether it is connected.
//
// # Watching the framebuffer
//
// [Client.Subscribe] delivers the damaged rectangle of every change on a
// one-slot channel; a subscriber that falls behind gets the union of what it
// missed, and never stalls the reader.
//
// # Server
//
// [Server.Serve] speaks RFB 3.8 on one viewer connection, with security
// type None (whoever hands it the connection has authorised the viewer; web
// checks the control token). A viewer must finish the handshake within
// HandshakeTimeout. ServerInit announces the source's size in
// [WireFormat]; a viewer may ask for any 32 bpp true-colour format with
// 8-bit channels at any shifts and byte order (noVNC asks for red at 0).
//
// A [FrameSource] supplies snapshots and damage notifications (the Client,
// through web). Updates are raw rectangles of everything damaged since the
// last update, plus any region a non-incremental request names, sent once
// the viewer has a request pending; like QEMU's they are not cut to the
// requested region, which is what lets this package's Client, with its one
// pixel requests, be a viewer too (the tests use it as one). A region over
// 4M pixels goes as several rectangles of whole rows, each in its own
// write. A size change goes as DesktopSize with the whole new frame; a
// viewer that did not advertise DesktopSize is disconnected then. Encoding
// is per pixel format (fast paths for QEMU's x8r8g8b8 and for RGBX), and
// bits no channel uses are set as in QEMU's surface, so a full frame in
// WireFormat is byte for byte the message QEMU 7.2 sends for it
// (TestServerFrameIsQEMUs, on the capture in testdata).
//
// Full frames are shared (issue 9). Every viewer asks for the whole screen
// when it connects and after a resize, and a VM may have several: takeover
// pages, the OSWorld VNC port, RFB proxy clients. A source that is a
// [SharedFrameSource] (the Client, and desk's display that embeds it)
// owns a [FrameCache]: an update of the whole framebuffer is encoded once
// per pixel format and framebuffer version, straight from the source under
// its read lock (no snapshot copy), by the first Server that needs it;
// Servers that ask meanwhile wait for that encode, later ones at the same
// version write the same bytes. No lock is held during writes, and each
// Server keeps its own write deadline. The cache keeps only the latest
// frame per format (at most four formats), drops frames of another size,
// and lets go of a frame unused for a few seconds. The Client's version
// counts updates that change pixels or size, so QEMU's one-pixel answers
// on an idle screen keep the cached frame valid. Incremental updates stay
// per connection: damage is each viewer's own.
//
// Input: key, pointer and QEMU messages are always read. They reach the
// [InputSink] only while InputAllowed says so (web: the connection's
// control token is still the VM's current one); otherwise they are dropped.
// QEMU's extended key event is always dropped, since the server does not
// offer it. ClientCutText is read and dropped, up to 1 MiB; more ends the
// connection. The server tracks the keys and buttons its viewer holds and
// releases them through the sink when the connection ends, when an input
// message finds input revoked, or at the next RevokeCheck tick while the
// viewer sends nothing: a person who closes the tab mid-drag or loses
// control mid-chord leaves nothing held in the guest. (A release is a key
// up for the keysym; if the agent holds the same key at that moment, it is
// released too.)
package vnc
