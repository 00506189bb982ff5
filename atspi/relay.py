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
# earlier walk left unread on the port, writes "DESKFARM-A11Y NONCE UID\n"
# and from then on copies bytes both ways until either side closes. The
# host's D-Bus messages are the host's business: this reads none of them.
#
# Exit status 3: no accessibility bus (no at-spi2-core in the image, or
# the session is not up); 4: the host is not connected to the port.
import os
import select
import socket
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
    sock = bus.fileno()
    while True:
        ready, _, _ = select.select([PORT, sock], [], [])
        if PORT in ready:
            b = os.read(PORT, 65536)
            if not b:
                return  # the host closed: the walk is over
            bus.sendall(b)
        if sock in ready:
            b = bus.recv(65536)
            if not b:
                return
            write_all(PORT, b)


if __name__ == "__main__":
    main()
