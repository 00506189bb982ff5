#!/usr/bin/env bash
# build.sh OUTDIR builds deskfarm's tiny guest image: Debian's kernel and an
# initramfs holding our static Go /init, busybox-static, qemu-guest-agent with
# its shared libraries, and the few kernel modules the guest needs.
#
# Contract (the image builder calls it so):
#   build.sh OUTDIR            cwd: a scratch work dir (debs and trees go here;
#                              kept between runs, so downloads are reused)
#   DESKFARM_RECIPE_DIR        dir holding this script, modules.list, cmdline
#   DESKFARM_TINY_INIT         the init binary, built with
#                              CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' ./images/tiny/init
# Output, each file replaced atomically:
#   OUTDIR/vmlinuz             Debian's kernel (linux-image-amd64's)
#   OUTDIR/initrd.img          newc cpio, compressed (see COMPRESS below)
#   OUTDIR/disk.qcow2          blank 64 MiB qcow2, only for savevm's state
#   OUTDIR/cmdline             kernel command line base, one line
# Lines "::step N/M what" mark progress; everything else is log. Any failure
# exits non-zero with a line starting "tiny: error:".
#
# Needs: apt-get, dpkg-deb, depmod and modprobe (kmod), cpio, gzip, ldd,
# qemu-img. Run as root for /dev/console in the initramfs (without it the
# kernel has no console for /init until /init mounts devtmpfs).
set -euo pipefail

STEPS=7
step() { echo "::step $1/$STEPS $2"; }
log() { echo "tiny: $*"; }
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
ARCH=amd64
MULTIARCH=x86_64-linux-gnu
DISK_SIZE=64M
# The kernel decompresses the initramfs before /init runs. Under TCG gzip
# costs about as much as zstd here and is the kernel's most common format
# (measured: see images/recipes/tiny/README.md).
COMPRESS=${DESKFARM_TINY_COMPRESS:-gzip}

step 1 "checking tools and inputs"
[ -n "$RECIPE" ] || die "DESKFARM_RECIPE_DIR is not set"
[ -n "$INIT" ] || die "DESKFARM_TINY_INIT is not set"
[ -f "$RECIPE/modules.list" ] || die "$RECIPE/modules.list is missing"
[ -f "$RECIPE/cmdline" ] || die "$RECIPE/cmdline is missing"
[ -f "$INIT" ] || die "init binary $INIT does not exist"
if ldd "$INIT" >/dev/null 2>&1; then
	die "init binary $INIT is dynamically linked; build it with CGO_ENABLED=0"
fi
for tool in apt-get apt-cache dpkg-deb depmod modprobe cpio ldd qemu-img "$COMPRESS"; do
	command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install kmod cpio qemu-utils $COMPRESS)"
done
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
if ! apt-cache policy linux-image-amd64 | grep -q 'Candidate: [0-9]'; then
	log "no candidate for linux-image-amd64: running apt-get update"
	apt-get update -q || die "apt-get update failed"
fi
candidate() { apt-cache policy "$1" | sed -n 's/^ *Candidate: //p'; }
kernel_pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*\)$/\1/p' | head -n1)
[ -n "$kernel_pkg" ] || die "cannot tell which kernel linux-image-amd64 depends on"
# qemu-guest-agent's library closure (Depends only; PreDepends are for dpkg).
lib_pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
	--no-breaks --no-replaces --no-enhances --no-pre-depends qemu-guest-agent |
	grep -E '^(lib|zlib)' | sort -u)
pkgs=("$kernel_pkg" busybox-static qemu-guest-agent $lib_pkgs)
mkdir -p debs
apt_opts=()
[ "$(id -u)" = 0 ] && apt_opts=(-o APT::Sandbox::User=root)
# deb_file PKG prints the path of PKG's candidate .deb in debs/.
deb_file() {
	local ver
	ver=$(candidate "$1")
	[ -n "$ver" ] && [ "$ver" != "(none)" ] || die "no installable version of $1"
	echo "debs/${1}_${ver//:/%3a}_$(apt-cache show --no-all-versions "$1" | sed -n 's/^Architecture: //p' | head -n1).deb"
}
missing=()
for p in "${pkgs[@]}"; do
	[ -f "$(deb_file "$p")" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "downloading ${missing[*]}"
	(cd debs && apt-get download -q "${apt_opts[@]}" "${missing[@]}") || die "apt-get download ${missing[*]} failed"
else
	log "all ${#pkgs[@]} packages already downloaded"
fi
for p in "${pkgs[@]}"; do
	f=$(deb_file "$p")
	[ -f "$f" ] || die "apt-get download did not produce $f"
	log "package $p $(candidate "$p")"
done

step 3 "unpacking packages"
rm -rf unpack
mkdir -p unpack/kernel unpack/busybox unpack/agent
dpkg-deb -x "$(deb_file "$kernel_pkg")" unpack/kernel
dpkg-deb -x "$(deb_file busybox-static)" unpack/busybox
for p in qemu-guest-agent $lib_pkgs; do
	dpkg-deb -x "$(deb_file "$p")" unpack/agent
done
kdir=$(ls -d unpack/kernel/lib/modules/*/ 2>/dev/null | head -n1)
[ -n "$kdir" ] || die "no lib/modules/VERSION in $kernel_pkg"
kver=$(basename "$kdir")
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

# busybox and a link for every applet (hwclock is what guest-set-time runs).
install -m 0755 unpack/busybox/bin/busybox root/bin/busybox
while read -r applet; do
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
[ -e "root/lib64/ld-linux-x86-64.so.2" ] || die "no /lib64/ld-linux-x86-64.so.2 in the tree"
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
(cd root && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
	cpio --null --create --format=newc --owner=0:0 --reproducible --quiet) |
	"${compress[@]}" >"$OUT/initrd.img.tmp"
mv -f "$OUT/initrd.img.tmp" "$OUT/initrd.img"
log "initramfs $(du -sk root | cut -f1) KiB unpacked, $(($(stat -c %s "$OUT/initrd.img") / 1024)) KiB packed"

step 7 "writing kernel, disk and command line"
cp "$vmlinuz" "$OUT/vmlinuz.tmp"
mv -f "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
rm -f "$OUT/disk.qcow2.tmp"
qemu-img create -q -f qcow2 "$OUT/disk.qcow2.tmp" "$DISK_SIZE"
mv -f "$OUT/disk.qcow2.tmp" "$OUT/disk.qcow2"
cmdline=$(grep -v '^#' "$RECIPE/cmdline" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ -n "$cmdline" ] || die "$RECIPE/cmdline has no command line"
printf '%s\n' "$cmdline" >"$OUT/cmdline.tmp"
mv -f "$OUT/cmdline.tmp" "$OUT/cmdline"
log "done: $(cd "$OUT" && ls -l vmlinuz initrd.img disk.qcow2 cmdline | awk '{printf "%s %s  ", $NF, $5}')"
log "cmdline: $cmdline"
