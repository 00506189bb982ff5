#!/usr/bin/env bash
# setup-host.sh prepares this machine to run deskfarm: Debian packages,
# the libvirt daemons, /dev/kvm access for QEMU and deskfarm's directories.
# It is idempotent and says what it did; run it as root (make run / make test do).
set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
	echo "setup: must run as root (it installs packages and starts libvirtd)" >&2
	exit 1
fi

# Packages. dpkg-query first so a prepared machine never touches apt.
pkgs=(qemu-system-x86 qemu-utils libvirt-daemon-system libvirt-clients
	debootstrap e2fsprogs busybox-static cpio kmod zstd xz-utils ca-certificates
	chromium
	# the osworld image's pyautogui is tested on the host under Xvfb
	xvfb python3-xlib python3-pil
	# the accessibility walk (package atspi) is tested on a real AT-SPI
	# bus on the host: a session bus (dbus-launch), the bus launcher and a
	# GTK 3 program with a known tree
	at-spi2-core libatk-adaptor dbus-x11 gtk-3-examples
	# OSWorld: recordings are encoded on the host (ffmpeg; ffprobe checks
	# them in tests); the provider package (python/deskfarm_osworld) needs
	# requests.
	ffmpeg python3 python3-requests
	# OSWorld's web monitor (monitor/main.py of an OSWorld checkout) reads
	# an exported trajectory in a test; it needs Flask and python-dotenv.
	python3-flask python3-dotenv)
# `setup-host.sh osworld-tasks` (make osworld-tasks) adds what
# python/osworld_tasks.py imports on the host with OSWorld's
# SetupController, getters and metrics: the Debian packages of their
# imports (the rest, e.g. playwright, python-pptx, are not in Debian and
# are stubbed and reported by the runner). make run and make test need none
# of them, so a fresh machine does not fetch them for the suite.
if [ "${1:-}" = osworld-tasks ]; then
	pkgs+=(python3-requests-toolbelt python3-openpyxl python3-lxml python3-cssselect
		python3-docx python3-odf python3-numpy python3-pandas python3-scipy
		python3-skimage python3-opencv python3-fitz python3-bs4 python3-tldextract
		python3-tz python3-pypdf python3-pypdf2 python3-mutagen python3-acoustid
		python3-xmltodict python3-yaml)
fi
# npm installs noVNC. A machine whose Node.js comes from elsewhere (e.g.
# NodeSource, which bundles npm and conflicts with Debian's npm) keeps its own.
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
# The osworld image's VS Code (images/recipes/osworld/code-server.sh) builds
# native Node modules on this host: a C++ compiler, make, and Node's
# headers (NodeSource's Node.js carries them; Debian's are in libnode-dev).
command -v c++ >/dev/null 2>&1 || pkgs+=(g++)
command -v make >/dev/null 2>&1 || pkgs+=(make)
node_prefix=$(dirname "$(dirname "$(readlink -f "$(command -v node || echo /usr/bin/node)")")")
[ -e "$node_prefix/include/node/node_api.h" ] || pkgs+=(libnode-dev)
missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
	say "installed ${#missing[@]} packages"
else
	say "packages already installed"
fi

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH=$PATH:/usr/local/go/bin
fi
command -v go >/dev/null || { echo "setup: Go toolchain not found (expected /usr/local/go)" >&2; exit 1; }

# /dev/kvm: when libvirt-qemu cannot open it, libvirt decides KVM "was enabled
# when probing but is not available now" and re-probes QEMU on almost every
# call (virsh define: 56 s instead of 0.02 s). Give it to the kvm group.
if [ -e /dev/kvm ]; then
	getent group kvm >/dev/null || groupadd --system kvm
	if [ "$(stat -c %G /dev/kvm)" != kvm ] || [ "$(( 0$(stat -c %a /dev/kvm) & 060 ))" != $((060)) ]; then
		chgrp kvm /dev/kvm
		chmod 0660 /dev/kvm
		say "/dev/kvm now group kvm, mode 0660"
	fi
	if id libvirt-qemu >/dev/null 2>&1 && ! id -nG libvirt-qemu | grep -qw kvm; then
		usermod -a -G kvm libvirt-qemu
		say "added libvirt-qemu to group kvm"
	fi
else
	say "no /dev/kvm: VMs will use QEMU's software emulation (TCG)"
fi

# Daemons. These machines have no systemd; use it where it is the init.
start_daemon() {
	local name=$1 pidfile=$2
	if [ -d /run/systemd/system ]; then
		systemctl is-active --quiet "$name" || { systemctl start "$name"; say "started $name (systemd)"; }
		return
	fi
	if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		return
	fi
	"$name" -d
	say "started $name"
}
start_daemon virtlogd /run/virtlogd.pid
start_daemon libvirtd /run/libvirtd.pid
for _ in $(seq 1 100); do
	[ -S /run/libvirt/libvirt-sock ] && break
	sleep 0.1
done
[ -S /run/libvirt/libvirt-sock ] || { echo "setup: libvirtd socket /run/libvirt/libvirt-sock did not appear" >&2; exit 1; }

# Directories QEMU (running as libvirt-qemu) must reach: not /tmp.
install -d -m 0755 /var/lib/deskfarm /var/lib/deskfarm/vms /var/cache/deskfarm /var/cache/deskfarm/images
say "ready: libvirtd up, state in /var/lib/deskfarm, image cache in /var/cache/deskfarm"
