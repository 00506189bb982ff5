#!/usr/bin/env bash
# build.sh OUTDIR builds deskfarm's tiny guest image: Debian's kernel and an
# initramfs holding our static Go /init, busybox-static, qemu-guest-agent with
# its shared libraries, and the few kernel modules the guest needs.
#
# Contract (the image builder calls it so):
#   build.sh OUTDIR            cwd: a scratch work dir (debs/, unpack/, root/
#                              go here; debs/ is reused by later runs)
#   DESKFARM_RECIPE_DIR        dir holding this script, modules.list, cmdline
#   DESKFARM_TINY_INIT         the init binary, built with CGO_ENABLED=0 go build
#                              -trimpath -ldflags='-s -w' ./images/tiny/init
# Optional:
#   DESKFARM_TINY_KERNEL       pvh (default) or bzimage, see step 7
#   DESKFARM_TINY_COMPRESS     zstd (default), gzip or cat (none)
# Output, each file replaced atomically:
#   OUTDIR/vmlinuz             Debian's kernel (the one linux-image-amd64 names):
#                              by default its uncompressed ELF vmlinux, which
#                              QEMU -kernel boots through the PVH entry
#   OUTDIR/initrd.img          newc cpio, compressed
#   OUTDIR/disk.qcow2          blank 64 MiB qcow2, only for savevm's state
#   OUTDIR/cmdline             kernel command line base, one line
# Lines "::step N/M what" mark progress; everything else is log. Any failure
# exits non-zero with a line starting "tiny: error:". Same inputs give the
# same initrd.img bytes.
#
# Needs apt-get, dpkg-deb, depmod and modprobe (kmod), cpio, zstd, xz, ldd,
# qemu-img. Run as root to get /dev/console into the initramfs (without it
# the kernel has no console for /init until /init mounts devtmpfs).
set -euo pipefail

STEPS=7
step() { echo "::step $1/$STEPS $2"; }
log() { echo "tiny: $*"; }
# apt_update runs apt-get update, waiting out another apt holding its lock.
apt_update() {
	local try
	for try in 1 2 3 4 5; do
		apt-get update -q && return 0
		log "apt-get update failed (try $try of 5); retrying in 10 s"
		sleep 10
	done
	die "apt-get update failed"
}
die() {
	echo "tiny: error: $*" >&2
	exit 1
}
set -E
trap 'echo "tiny: error: line $LINENO failed (exit $?): $BASH_COMMAND" >&2' ERR

[ $# -eq 1 ] || die "usage: build.sh OUTDIR"
OUT=$1
RECIPE=${DESKFARM_RECIPE_DIR:-}
INIT=${DESKFARM_TINY_INIT:-}
WORK=$(pwd)
MULTIARCH=x86_64-linux-gnu
DISK_SIZE=64M
# The kernel unpacks the initramfs (in the background, before /init runs).
# Measured under TCG, 1 vCPU, 12.3 MiB cpio: zstd -19 3.9 MiB, ~0.29 s to
# unpack; gzip -9 5.1 MiB, ~0.35 s; uncompressed ~0.12 s. Boot to ready
# differed by under 0.1 s (noise); zstd is smaller and no slower.
COMPRESS=${DESKFARM_TINY_COMPRESS:-zstd}
# pvh: OUTDIR/vmlinuz is the bzImage's ELF payload, booted through its PVH
# entry; bzimage: Debian's bzImage as is.
KERNEL_FORMAT=${DESKFARM_TINY_KERNEL:-pvh}

step 1 "checking tools and inputs"
[ -n "$RECIPE" ] || die "DESKFARM_RECIPE_DIR is not set"
[ -n "$INIT" ] || die "DESKFARM_TINY_INIT is not set"
[ -f "$RECIPE/modules.list" ] || die "$RECIPE/modules.list is missing"
[ -f "$RECIPE/cmdline" ] || die "$RECIPE/cmdline is missing"
[ -f "$INIT" ] || die "init binary $INIT does not exist"
[ "$(head -c4 "$INIT" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || die "init binary $INIT is not an ELF executable"
if ldd "$INIT" >/dev/null 2>&1; then
	die "init binary $INIT is dynamically linked; build it with CGO_ENABLED=0"
fi
for tool in apt-get apt-cache dpkg-deb depmod modprobe cpio ldd qemu-img "$COMPRESS"; do
	command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install kmod cpio qemu-utils zstd xz-utils)"
done
case $KERNEL_FORMAT in
pvh) command -v xz >/dev/null || die "xz not found (Debian: apt-get install xz-utils)" ;;
bzimage) ;;
*) die "DESKFARM_TINY_KERNEL=$KERNEL_FORMAT: want pvh or bzimage" ;;
esac
case $COMPRESS in
gzip) compress=(gzip -9 -n) ;;
zstd) compress=(zstd -19 -q -T0 --stdout) ;;
cat) compress=(cat) ;;
*) die "DESKFARM_TINY_COMPRESS=$COMPRESS: want gzip, zstd or cat" ;;
esac
case $OUT in /*) ;; *) OUT=$WORK/$OUT ;; esac
mkdir -p "$OUT"
log "work dir $WORK, output $OUT"

step 2 "downloading Debian packages"
# (Outputs are captured before grepping: with pipefail, grep -q closing the
# pipe early would fail the writer.)
policy=$(apt-cache policy linux-image-amd64)
if ! grep -q 'Candidate: [0-9]' <<<"$policy"; then
	log "no candidate for linux-image-amd64: running apt-get update"
	apt_update
fi
# resolve_packages sets kernel_pkg, lib_pkgs, pkgs, and deb[PKG] and ver[PKG]:
# where apt-get download puts PKG's candidate version (NAME_VERSION_ARCH.deb,
# the epoch's colon escaped) and that version. Few apt-cache calls: each
# costs about a second.
declare -A deb ver
resolve_packages() {
	kernel_pkg=$(apt-cache depends linux-image-amd64 | awk '/^ *Depends: linux-image-[0-9]/ && !k {k = $2} END {print k}')
	[ -n "$kernel_pkg" ] || die "cannot tell which kernel linux-image-amd64 depends on"
	# qemu-guest-agent's library closure (Depends only; PreDepends are for dpkg).
	mapfile -t lib_pkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances --no-pre-depends qemu-guest-agent |
		grep -E '^(lib|zlib)' | sort -u)
	[ ${#lib_pkgs[@]} -gt 0 ] || die "cannot resolve qemu-guest-agent's libraries"
	pkgs=("$kernel_pkg" busybox-static qemu-guest-agent "${lib_pkgs[@]}")
	deb=() ver=()
	local p v a
	while read -r p v a; do
		deb[$p]=debs/${p}_${v//:/%3a}_$a.deb
		ver[$p]=$v
	done < <(apt-cache show --no-all-versions "${pkgs[@]}" |
		awk '/^Package:/{p=$2} /^Version:/{v=$2} /^Architecture:/{a=$2}
			/^$/{if(p!="")print p, v, a; p=""} END{if(p!="")print p, v, a}')
	for p in "${pkgs[@]}"; do
		[ -n "${deb[$p]:-}" ] || die "apt-cache knows no installable version of $p"
	done
}

# fetch_packages downloads the debs not yet in debs/; it fails (returns 1)
# when apt-get download does.
fetch_packages() {
	local missing=() p apt_opts=()
	[ "$(id -u)" = 0 ] && apt_opts=(-o APT::Sandbox::User=root) # debs/ is not _apt's
	for p in "${pkgs[@]}"; do
		[ -f "${deb[$p]}" ] || missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		log "all ${#pkgs[@]} packages already downloaded"
		return 0
	fi
	log "downloading ${missing[*]}"
	(cd debs && apt-get download -q "${apt_opts[@]}" "${missing[@]}") || return 1
	for p in "${missing[@]}"; do
		[ -f "${deb[$p]}" ] || { log "apt-get download did not produce ${deb[$p]}"; return 1; }
	done
}

mkdir -p debs
resolve_packages
if ! fetch_packages; then
	log "download failed; the package lists may be stale: apt-get update, then retrying"
	apt_update
	resolve_packages
	fetch_packages || die "apt-get download failed after apt-get update"
fi
# Keep only the debs this build uses (older versions pile up otherwise).
declare -A keep
for p in "${pkgs[@]}"; do
	keep[${deb[$p]}]=1
	log "package $p ${ver[$p]}"
done
for f in debs/*.deb; do
	[ -n "${keep[$f]:-}" ] || { rm -f "$f"; log "removed superseded $f"; }
done

step 3 "unpacking packages"
# unpack/.debs names the debs a complete unpack came from: the same debs
# are not unpacked again.
unpacked=$(for p in "${pkgs[@]}"; do echo "${deb[$p]}"; done)
if [ -f unpack/.debs ] && [ "$(cat unpack/.debs)" = "$unpacked" ]; then
	log "packages already unpacked"
else
	rm -rf unpack
	mkdir -p unpack/kernel unpack/busybox unpack/agent
	dpkg-deb -x "${deb[$kernel_pkg]}" unpack/kernel
	dpkg-deb -x "${deb[busybox-static]}" unpack/busybox
	for p in qemu-guest-agent "${lib_pkgs[@]}"; do
		dpkg-deb -x "${deb[$p]}" unpack/agent
	done
	printf '%s\n' "$unpacked" >unpack/.debs
fi
kver=$(find unpack/kernel/lib/modules -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | awk 'NR == 1')
[ -n "$kver" ] || die "no lib/modules/VERSION in $kernel_pkg"
vmlinuz=unpack/kernel/boot/vmlinuz-$kver
[ -f "$vmlinuz" ] || die "$vmlinuz missing from $kernel_pkg"
log "kernel $kver"

step 4 "resolving kernel modules"
depmod -b "$WORK/unpack/kernel" "$kver" || die "depmod -b unpack/kernel $kver failed"
modules=() # .ko paths relative to unpack/kernel, dependencies first
seen=" "
while read -r mod; do
	mod=${mod%%#*}
	mod=${mod//[[:space:]]/}
	[ -n "$mod" ] || continue
	deps=$(modprobe -d "$WORK/unpack/kernel" -S "$kver" --show-depends "$mod" 2>&1) ||
		die "module $mod: $deps"
	while read -r kind path _; do
		case $kind in
		builtin) log "module $path is built in" ;;
		insmod)
			rel=${path#"$WORK/unpack/kernel/"}
			case $seen in *" $rel "*) continue ;; esac
			seen="$seen$rel "
			modules+=("$rel")
			;;
		esac
	done <<<"$deps"
done <"$RECIPE/modules.list"
[ ${#modules[@]} -gt 0 ] || die "no modules resolved from $RECIPE/modules.list"
log "modules in load order: $(for m in "${modules[@]}"; do basename "$m" .ko; done | tr '\n' ' ')"

step 5 "assembling the initramfs tree"
rm -rf root
mkdir -p root/{bin,sbin,usr/bin,usr/sbin,lib/$MULTIARCH,lib64,etc/deskfarm,dev,proc,sys,tmp,run,root,var/tmp}
chmod 1777 root/tmp root/var/tmp
chmod 0700 root/root
ln -s ../run root/var/run
install -m 0755 "$INIT" root/init

# busybox and a link for every applet (hwclock is what guest-set-time runs),
# except modprobe: the kernel runs /sbin/modprobe for algorithms and drivers
# it does not have (4 times during boot, for crypto-hmac(sha1) and
# crypto-cbc(aes)); without it each request fails at once instead of costing
# a process start under TCG. /init loads the modules itself.
install -m 0755 unpack/busybox/bin/busybox root/bin/busybox
while read -r applet; do
	case $applet in */modprobe) continue ;; esac
	[ -e "root/$applet" ] || [ -L "root/$applet" ] || ln -s /bin/busybox "root/$applet"
done < <(root/bin/busybox --list-full)
[ -L root/sbin/hwclock ] || die "busybox has no sbin/hwclock applet"
[ -L root/bin/sh ] || die "busybox has no bin/sh applet"

# qemu-ga and the libraries it loads, found as the guest's loader would.
ga=unpack/agent/usr/sbin/qemu-ga
[ -x "$ga" ] || die "$ga missing from qemu-guest-agent"
install -m 0755 "$ga" root/usr/sbin/qemu-ga
libpath=$WORK/unpack/agent/lib/$MULTIARCH:$WORK/unpack/agent/usr/lib/$MULTIARCH
ldd_out=$(LD_LIBRARY_PATH=$libpath ldd "$ga") || die "ldd $ga failed: $ldd_out"
if grep -q 'not found' <<<"$ldd_out"; then
	die "qemu-ga needs libraries neither unpacked nor on this host: $(grep 'not found' <<<"$ldd_out" | tr '\n' ' ')"
fi
while read -r name arrow path _; do
	if [ "$arrow" = "=>" ] && [ -f "$path" ]; then
		cp -L "$path" "root/lib/$MULTIARCH/$name"
		log "library $name from ${path#"$WORK/"}"
	elif [[ $name == /* ]]; then # the program interpreter
		interp=unpack/agent/lib/$MULTIARCH/$(basename "$name")
		[ -f "$interp" ] || interp=$name
		cp -L "$interp" "root/lib/$MULTIARCH/$(basename "$name")"
		ln -sf "/lib/$MULTIARCH/$(basename "$name")" "root$name"
		log "interpreter $name from ${interp#"$WORK/"}"
	fi
done <<<"$ldd_out"
[ -L "root/lib64/ld-linux-x86-64.so.2" ] || die "no /lib64/ld-linux-x86-64.so.2 in the tree"
ga_version=$("root/lib/$MULTIARCH/ld-linux-x86-64.so.2" --inhibit-cache --library-path "root/lib/$MULTIARCH" \
	root/usr/sbin/qemu-ga --version 2>&1) || die "qemu-ga does not run with the tree's libraries: $ga_version"
log "inside the tree: $(head -n1 <<<"$ga_version")"

# Kernel modules and the ordered list /init loads.
: >root/etc/deskfarm/modules
for m in "${modules[@]}"; do
	mkdir -p "root/$(dirname "$m")"
	cp "unpack/kernel/$m" "root/$m"
	echo "/$m" >>root/etc/deskfarm/modules
done

# The rest of a minimal system.
echo tiny >root/etc/hostname
printf 'root:x:0:0:root:/root:/bin/sh\n' >root/etc/passwd
printf 'root:x:0:\ntty:x:5:\n' >root/etc/group
printf '127.0.0.1\tlocalhost\n127.0.1.1\ttiny\n' >root/etc/hosts
printf 'ID=deskfarm-tiny\nNAME="deskfarm tiny"\nPRETTY_NAME="deskfarm tiny (Debian kernel %s %s)"\n' \
	"$kver" "${ver[$kernel_pkg]}" >root/etc/os-release
# qemu-ga's guest-shutdown runs /sbin/shutdown -h|-P|-r +0.
cat >root/sbin/shutdown <<'EOF'
#!/bin/sh
# shutdown for qemu-ga's guest-shutdown: -r reboots, anything else powers off.
sync
case " $* " in
*" -r "*) exec reboot -f ;;
*) exec poweroff -f ;;
esac
EOF
chmod 0755 root/sbin/shutdown
if [ "$(id -u)" = 0 ]; then
	mknod -m 0600 root/dev/console c 5 1
else
	log "not root: no /dev/console node in the initramfs"
fi

step 6 "packing the initramfs ($COMPRESS)"
# Same inputs, same bytes: fixed mtimes, sorted names, no inode numbers.
find root -exec touch -h -d @0 {} +
(cd root && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
	cpio --null --create --format=newc --owner=0:0 --reproducible --quiet) |
	"${compress[@]}" >"$OUT/initrd.img.tmp"
mv -f "$OUT/initrd.img.tmp" "$OUT/initrd.img"
log "initramfs $(du -sk root | cut -f1) KiB unpacked, $(($(stat -c %s "$OUT/initrd.img") / 1024)) KiB packed"

step 7 "writing kernel, disk and command line"
if [ "$KERNEL_FORMAT" = pvh ]; then
	# The bzImage's payload is an xz-compressed ELF vmlinux with a PVH entry
	# note (CONFIG_PVH=y). QEMU's -kernel boots such an ELF directly (through
	# its pvh.bin option ROM), skipping the decompression of ~63 MiB: under
	# TCG that took 2.5-3.5 s of a 7-8.5 s boot to ready.
	off=$(LC_ALL=C grep -m1 -obUaP '\xfd7zXZ\x00' "$vmlinuz" | awk -F: 'NR == 1 {print $1}')
	[ -n "$off" ] || die "no xz payload in $vmlinuz (set DESKFARM_TINY_KERNEL=bzimage)"
	tail -c +$((off + 1)) "$vmlinuz" >unpack/vmlinux.xz
	xz -dc --single-stream unpack/vmlinux.xz >"$OUT/vmlinuz.tmp" ||
		die "cannot decompress the kernel payload of $vmlinuz"
	[ "$(head -c4 "$OUT/vmlinuz.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] ||
		die "the payload of $vmlinuz is not an ELF image"
	if command -v readelf >/dev/null; then
		notes=$(readelf -n "$OUT/vmlinuz.tmp")
		grep -qE 'Unknown note type: \(0x00000012\)|PHYS32_ENTRY' <<<"$notes" ||
			die "the kernel has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY); set DESKFARM_TINY_KERNEL=bzimage"
	fi
	log "kernel: PVH ELF vmlinux, $(($(stat -c %s "$OUT/vmlinuz.tmp") / 1048576)) MiB"
else
	cp "$vmlinuz" "$OUT/vmlinuz.tmp"
	log "kernel: bzImage"
fi
mv -f "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
rm -f "$OUT/disk.qcow2.tmp"
qemu-img create -q -f qcow2 "$OUT/disk.qcow2.tmp" "$DISK_SIZE"
mv -f "$OUT/disk.qcow2.tmp" "$OUT/disk.qcow2"
cmdline=$({ grep -v '^#' "$RECIPE/cmdline" || true; } | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ -n "$cmdline" ] || die "$RECIPE/cmdline has no command line"
printf '%s\n' "$cmdline" >"$OUT/cmdline.tmp"
mv -f "$OUT/cmdline.tmp" "$OUT/cmdline"
log "done: $(cd "$OUT" && stat -c '%n %s bytes' vmlinuz initrd.img disk.qcow2 cmdline | paste -sd, | sed 's/,/, /g')"
log "cmdline: $cmdline"
