# deskfarm's AT-SPI relay (package atspi): joins the host's walker to the
# guest's accessibility bus. Run by the guest agent as
#   sh -c 'exec 3<>PORT && exec <guestx wrapper> python3 - NONCE'
# so fd 3 is the virtio-serial port org.deskfarm.a11y.0, opened as root,
# and this runs as the desktop user in the session's environment (the
# accessibility bus takes only its own user's connections).
#
# It connects to the accessibility bus at the socket at-spi-bus-launcher
# listens on for this display, or, when there is none yet, asks the session
# bus for its address (as every AT-SPI client does, org.a11y.Bus.GetAddress,
# which starts the launcher): dbus-send is a process start more, a few
# hundred milliseconds under TCG. Then it drops whatever an
# earlier walk left unread on the port and writes "DESKFARM-A11Y NONCE UID\n".
#
# From then on the port carries frames both ways (package atspi, mux.go):
# a kind byte, a channel and a length (big-endian uint32s), the payload.
# Channel 0 is the accessibility bus. The host opens others ("O", payload
# a socket path) on applications' own sockets, the peer-to-peer D-Bus
# servers at-spi2-atk listens on (Application.GetApplicationBusAddress),
# which answer without the bus daemon's two hops. Only the user's own
# sockets named as at-spi2-atk names them are opened. "D" carries bytes,
# "C" ends a channel (from here, with the reason). The host's D-Bus
# messages are the host's business: this reads none of them. The relay
# ends when the host closes the port or the bus closes.
#
# With a second argument, SECONDS, the relay is kept (package atspi,
# keep.go): once its hello is written it forks, the parent exits 0 (the
# guest agent's exec, and the VM lock it holds, end there) and the child
# relays on, its stdio on /dev/null, until the host closes the port, or
# SECONDS have passed.
#
# Exit status 3: no accessibility bus (no at-spi2-core in the image, or
# the session is not up); 4: the host is not connected to the port.
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
from urllib.parse import unquote_to_bytes

PORT = 3


def die(code, msg):
    sys.stderr.write("deskfarm a11y relay: %s\n" % msg)
    sys.exit(code)


def bus_address():
    try:
        p = subprocess.run(
            ["dbus-send", "--session", "--print-reply=literal", "--reply-timeout=20000",
             "--dest=org.a11y.Bus", "/org/a11y/bus", "org.a11y.Bus.GetAddress"],
            capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        die(3, "ask the session bus for the accessibility bus: %s" % e)
    if p.returncode != 0:
        die(3, "no accessibility bus: %s" % (p.stderr.strip() or p.stdout.strip()))
    return p.stdout.strip()


def connect(address):
    for part in address.split(";"):
        kind, _, params = part.partition(":")
        if kind != "unix":
            continue
        kv = dict(x.split("=", 1) for x in params.split(",") if "=" in x)
        if "path" in kv:
            target = unquote_to_bytes(kv["path"])
        elif "abstract" in kv:
            target = b"\0" + unquote_to_bytes(kv["abstract"])
        else:
            continue
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(target)
            return s
        except OSError as e:
            s.close()
            last = e
    die(3, "cannot connect to the accessibility bus at %r" % address)


def launcher_socket():
    # at-spi2-core 2.46's launcher: $XDG_RUNTIME_DIR/at-spi/bus_N (else
    # ~/.cache/at-spi/bus_N) for display :N.
    display = os.environ.get("DISPLAY", "")
    n = display.partition(":")[2].partition(".")[0]
    if not n.isdigit():
        return None
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.environ.get("HOME", "/"), ".cache")
    path = os.path.join(base, "at-spi", "bus_" + n)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return s
    except OSError:
        s.close()
        return None


def write_all(fd, data):
    while data:
        n = os.write(fd, data)
        data = data[n:]


HEADER = struct.Struct(">cII")
MAX_FRAME = 1 << 20


def frame(kind, chan, payload=b""):
    write_all(PORT, HEADER.pack(kind, chan, len(payload)) + payload)


def peer_socket(path):
    """Connects to an application's at-spi2-atk socket: .../at-spi2-XXXXXX/socket
    (at-spi2-core 2.46 spi_atk_create_socket) or .../at-spi2-socket-PID
    (older), a socket of this user's."""
    if not os.path.isabs(path) or os.path.normpath(path) != path:
        raise OSError("not an absolute, clean path")
    base, parent = os.path.basename(path), os.path.basename(os.path.dirname(path))
    if not (base == "socket" and parent.startswith("at-spi2-") or base.startswith("at-spi2-socket-")):
        raise OSError("not an at-spi2-atk socket's name")
    st = os.stat(path)
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        raise OSError("not a socket of uid %d" % os.getuid())
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        s.close()
        raise
    return s


def main():
    nonce = sys.argv[1]
    bus = launcher_socket() or connect(bus_address())
    os.set_blocking(PORT, False)
    while True:  # what an earlier walk left unread
        try:
            b = os.read(PORT, 65536)
        except BlockingIOError:
            break
        if not b:
            die(4, "the host is not connected to the port")
    os.set_blocking(PORT, True)
    write_all(PORT, ("DESKFARM-A11Y %s %d\n" % (nonce, os.getuid())).encode())
    if len(sys.argv) > 2:
        lifetime = int(sys.argv[2])
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() != 0:
            os._exit(0)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        signal.alarm(lifetime)  # SIGALRM's default action ends the relay
    chans = {0: bus}  # channel: socket
    fds = {bus.fileno(): 0}
    buf = b""

    def close(chan, why=""):
        s = chans.pop(chan, None)
        if s is not None:
            del fds[s.fileno()]
            s.close()
            frame(b"C", chan, why.encode()[:4096])

    while True:
        ready, _, _ = select.select([PORT] + list(fds), [], [])
        if PORT in ready:
            b = os.read(PORT, 65536)
            if not b:
                return  # the host closed: the walk is over
            buf += b
            while len(buf) >= HEADER.size:
                kind, chan, n = HEADER.unpack_from(buf)
                if n > MAX_FRAME:
                    die(5, "a frame of %d bytes from the host" % n)
                if len(buf) < HEADER.size + n:
                    break
                payload, buf = buf[HEADER.size:HEADER.size + n], buf[HEADER.size + n:]
                if kind == b"D" and chan in chans:
                    try:
                        chans[chan].sendall(payload)
                    except OSError as e:
                        # An application that went away ends its
                        # channel, not the walk.
                        close(chan, "write: %s" % e)
                elif kind == b"O" and chan not in chans and chan != 0:
                    try:
                        s = peer_socket(os.fsdecode(payload))
                    except OSError as e:
                        frame(b"C", chan, ("open %s: %s" % (os.fsdecode(payload), e)).encode()[:4096])
                        continue
                    chans[chan] = s
                    fds[s.fileno()] = chan
                elif kind == b"C":
                    if chan == 0:
                        return
                    s = chans.pop(chan, None)
                    if s is not None:
                        del fds[s.fileno()]
                        s.close()
        for fd in ready:
            chan = fds.get(fd)
            if chan is None:
                continue
            try:
                # Not blocking: the fd may be a socket opened just now in
                # the place of one closed above.
                b = chans[chan].recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError as e:
                b, why = b"", str(e)
            else:
                why = "closed"
            if b:
                frame(b"D", chan, b)
            elif chan == 0:
                return  # the bus is gone
            else:
                close(chan, why)


if __name__ == "__main__":
    main()
