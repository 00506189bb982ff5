// Package vnc is deskfarm's one RFB client per VM: a live mirror of the
// guest framebuffer and the input path into the guest. [Client] implements
// actions.Display.
//
// # Transport
//
// Each VM's QEMU serves VNC on a unix socket
// (<graphics type='vnc'><listen type='socket'/>), without authentication.
// The RFB handshake and the read loop are github.com/mitchellh/go-vnc's; the
// rest is ours, because of what go-vnc gets wrong for this use:
//
//   - Its raw decoder reads one field per pixel (about 310 ms for a 1280x800
//     frame). A custom ServerMessage with Type()==0 in
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
// reallocated and a full update requested), Cursor (-239: image, mask and
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
// # Freshness: fences
//
// The reader keeps exactly one FramebufferUpdateRequest in flight: after each
// update it asks for the next incremental one. QEMU answers an incremental
// request only when something changed, at its refresh timer, which backs off
// to 3 s while the guest is idle; only client messages of type > 3 (key,
// pointer, cut text, QEMU) reset it to 30 ms (protocol_client_msg in
// ui/vnc.c).
//
// [Client.Settle] proves the mirror current with a fence. It writes a wake-up
// (a KeyEvent releasing a key this client does not hold: QEMU's keyboard
// state filters the release, so the guest sees nothing, but the refresh timer
// is reset) and a non-incremental request for one pixel. QEMU always answers
// a non-incremental request with at least one rectangle, at its next refresh
// tick, together with everything that changed. Every pixel-carrying update
// QEMU sends consumes all requests it has processed and needs at least one
// it has not, so the k-th such update on a connection was generated after
// QEMU processed our k-th request: counting updates gives a lower bound on
// which request an update answers, whatever QEMU coalesced. A fence with
// sequence number n is complete once n updates have arrived; while a fence
// is behind, the reader asks for forced (non-incremental) updates instead of
// incremental ones, so the count keeps moving even on an idle screen.
// Updates carrying only pseudo-rectangles (cursor, resize, the extended key
// event acknowledgement) are written by QEMU outside this request cycle and
// are not counted. Two details of QEMU 7.2 matter here: a non-incremental
// request for an empty or off-screen region makes QEMU queue an empty job and
// stop updating that client, so fences always ask for pixel (0,0); and an
// update job aborted by a display switch puts its request back, so no answer
// is lost (vnc_abort_display_jobs).
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
// # Watching the framebuffer
//
// [Client.Subscribe] delivers the damaged rectangle of every change on a
// one-slot channel; a subscriber that falls behind gets the union of what it
// missed, and never stalls the reader.
package vnc
