#!/usr/bin/env bash
# build.sh OUTDIR builds deskfarm's "desktop" image: Debian bookworm with a
# light LXDE-style session (Xorg on bochs-drm, openbox, lxpanel, pcmanfm),
# the apps of Anthropic's computer-use reference desktop, each a launcher on
# the panel (a terminal: lxterminal; a file manager: pcmanfm; a text editor:
# mousepad; a web browser: Firefox ESR; LibreOffice Writer, Calc and Impress;
# a paint program: mtPaint; a calculator: galculator), user "user" logged in
# automatically, the QEMU guest agent, and a readiness signal on the
# virtio-serial port org.deskfarm.session.0 once the panel is drawn.
#
# It writes into OUTDIR:
#   disk.qcow2  whole-disk ext4 (no partition table, root=/dev/vda), 6 GiB virtual
#               (the variant's disk_size)
#   vmlinuz     Debian's regular linux-image-amd64 kernel
#   initrd.img  a small initramfs (virtio_pci, virtio_blk, ext4 and their deps)
#   cmdline     the kernel command line base; the VM layer appends
#               " video=WxH deskfarm.screen=WxH"
#
# Run by deskfarm's image builder (package images) as root, with the current
# directory a scratch work dir and:
#   DESKFARM_RECIPE_DIR       this recipe's files
#   DESKFARM_VARIANT_DIR      (optional) a recipe that builds on this one, such
#                             as osworld: its variant.sh is sourced before the
#                             build to set the image name, disk size, password,
#                             session and extra packages, and the hooks
#                             variant_configure and variant_check; put takes
#                             a file from it before this directory
#   DESKFARM_MIRROR           Debian mirror (default http://deb.debian.org/debian)
#   DESKFARM_SECURITY_MIRROR  Debian security mirror (default
#                             http://deb.debian.org/debian-security; empty: none)
# It prints "::step N/M description" before each major step.
set -euo pipefail

out=${1:?usage: build.sh OUTDIR}
recipe=${DESKFARM_RECIPE_DIR:?DESKFARM_RECIPE_DIR is not set}
variant=${DESKFARM_VARIANT_DIR:-}
mirror=${DESKFARM_MIRROR:-http://deb.debian.org/debian}
security=${DESKFARM_SECURITY_MIRROR-http://deb.debian.org/debian-security}
suite=bookworm
work=$PWD
root=$work/rootfs

# What a variant may change (see variant.sh in the osworld recipe).
image=desktop
disk_size=6G
password=user
# the session's own programs and its apps (a variant that sets its own
# replaces all of them)
session_packages=(
	openbox lxpanel pcmanfm lxterminal mousepad
	firefox-esr
	libreoffice-writer libreoffice-calc libreoffice-impress libreoffice-gtk3
	libreoffice-style-colibre fonts-liberation2
	mtpaint galculator
)
extra_packages=()
# variant_configure runs at the end of step 3, before the user's home is
# chowned: it installs the variant's files. variant_check, if defined, is
# a step of its own before the clean-up.
variant_configure() { :; }
if [ -n "$variant" ]; then
	# shellcheck source=/dev/null
	. "$variant/variant.sh"
fi
steps=6
if declare -F variant_check >/dev/null; then
	steps=7
fi
step_n=0
step() {
	step_n=$((step_n + 1))
	echo "::step $step_n/$steps $1"
}

# The package set; --no-install-recommends keeps it to what these need.
packages=(
	# boot and system
	linux-image-amd64 initramfs-tools systemd-sysv udev kmod dbus libpam-systemd
	qemu-guest-agent sudo procps less python3
	# in-guest screenshots (what harnesses without a VNC mirror use; a benchmark baseline)
	scrot
	# X
	xserver-xorg-core xserver-xorg-input-libinput xinit xauth x11-xserver-utils xcvt
	xdotool dbus-x11 fonts-dejavu-core librsvg2-common
	# the CLIPBOARD selection for clipboard actions (package guestx runs it as the user)
	xclip
	"${session_packages[@]}" "${extra_packages[@]}"
)

# Units that would slow boot or do background work nobody needs in a
# short-lived VM without network.
masked_units=(
	apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer
	e2scrub_all.timer e2scrub_reap.service fstrim.timer man-db.timer
	systemd-networkd-wait-online.service systemd-networkd.service
	systemd-timesyncd.service keyboard-setup.service console-setup.service
	# The image is built with current caches; these would rebuild them on
	# first boot because /usr looks newer than /etc/.updated.
	ldconfig.service systemd-hwdb-update.service systemd-update-done.service
	# getty on the serial console (console=ttyS0 is for logs only).
	serial-getty@ttyS0.service
	# Early-boot work for features this VM does not use: device mapper,
	# loop devices, FUSE, pstore, debugfs, hugepages, binfmt_misc.
	modprobe@dm_mod.service modprobe@loop.service modprobe@fuse.service
	modprobe@efi_pstore.service systemd-pstore.service
	sys-kernel-debug.mount sys-kernel-tracing.mount dev-hugepages.mount
	systemd-binfmt.service proc-sys-fs-binfmt_misc.automount
	modprobe@drm.service modprobe@configfs.service sys-kernel-config.mount
	dev-mqueue.mount
	# Users exist already; the kernel mounts root read-write (cmdline rw).
	systemd-sysusers.service systemd-remount-fs.service
	# Boot records in utmp/wtmp (both on the way to sysinit.target), and the
	# random seed file, which every VM cloned from this image would share.
	systemd-update-utmp.service systemd-update-utmp-runlevel.service
	systemd-random-seed.service
	# The per-user systemd manager: the session needs no user units (its
	# D-Bus comes from dbus-launch), and logind holds the login until the
	# manager is up (2-3 s under TCG).
	user@.service
)

# systemd generators for things this VM does not have (encrypted, verity
# or GPT-discovered disks, hibernation, SysV scripts, rc.local, serial
# gettys): each costs an exec early in boot.
masked_generators=(
	systemd-cryptsetup-generator systemd-gpt-auto-generator
	systemd-hibernate-resume-generator systemd-integritysetup-generator
	systemd-veritysetup-generator systemd-rc-local-generator
	systemd-sysv-generator systemd-system-update-generator
	systemd-run-generator systemd-debug-generator systemd-getty-generator
)

# Kernel driver trees for hardware a QEMU desktop VM never has (about
# 150 MB); depmod runs afterwards.
pruned_modules=(
	drivers/gpu/drm/amd drivers/gpu/drm/radeon drivers/gpu/drm/nouveau
	drivers/gpu/drm/i915 drivers/net/wireless drivers/media
	drivers/infiniband drivers/staging
)

# in_root CMD... runs CMD in the rootfs with a clean environment.
in_root() {
	chroot "$root" /usr/bin/env -i \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

mounts=()
mount_fs() { # mount_fs TYPE DIR [OPTIONS]
	mount -t "$1" ${3:+-o "$3"} "$1" "$2"
	mounts+=("$2")
}

unmount_all() {
	local i
	for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
		if mountpoint -q "${mounts[i]}"; then
			umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}"
		fi
	done
	mounts=()
}

trap unmount_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Installs a recipe file into the rootfs: put MODE SRC DEST. The variant's
# file of that name wins over this recipe's.
put() {
	local src=$recipe/$2
	if [ -n "$variant" ] && [ -e "$variant/$2" ]; then
		src=$variant/$2
	fi
	install -D -m "$1" "$src" "$root$3"
}

step "debootstrap $suite (minbase)"
mkdir -p "$root"
debootstrap --variant=minbase --components=main "$suite" "$root" "$mirror"

step "install packages"
mount_fs proc "$root/proc"
mount_fs sysfs "$root/sys"
mkdir -p "$root/dev/pts"
mount_fs devpts "$root/dev/pts" newinstance,ptmxmode=0666
{
	echo "deb $mirror $suite main"
	echo "deb $mirror $suite-updates main"
	if [ -n "$security" ]; then
		echo "deb $security $suite-security main"
	fi
} >"$root/etc/apt/sources.list"
cat >"$root/etc/apt/apt.conf.d/90deskfarm" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
EOF
put 0644 dpkg-nodoc /etc/dpkg/dpkg.cfg.d/deskfarm-nodoc
# dpkg syncs each file it unpacks; the build writes the file system out
# whole at the end, so it needs none of that (removed in the clean-up).
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/deskfarm-unsafe-io"
# No daemons start in the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# Before the kernel package: its postinst builds the initramfs with these.
put 0644 initramfs.conf /etc/initramfs-tools/conf.d/deskfarm
put 0755 initramfs-hook /etc/initramfs-tools/hooks/deskfarm
put 0755 initramfs-no-udev /etc/initramfs-tools/scripts/init-top/udev
put 0755 initramfs-no-udev /etc/initramfs-tools/scripts/init-bottom/udev
put 0644 modprobe-blacklist.conf /etc/modprobe.d/deskfarm-blacklist.conf
in_root apt-get -q update
in_root apt-get -q -y -o Dpkg::Use-Pty=0 install "${packages[@]}"

step "configure system and session"
echo deskfarm >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tdeskfarm\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
printf '/dev/vda\t/\text4\trw,noatime\t0\t0\n' >"$root/etc/fstab"
echo 'LANG=C.UTF-8' >"$root/etc/default/locale"
rm -f "$root/etc/resolv.conf" # no network in the guest
in_root useradd --create-home --shell /bin/bash --groups sudo,video,input,audio user
echo "user:$password" | in_root chpasswd

put 0644 autologin.conf /etc/systemd/system/getty@tty1.service.d/autologin.conf
put 0644 systemd.conf /etc/systemd/system.conf.d/deskfarm.conf
put 0644 journald.conf /etc/systemd/journald.conf.d/deskfarm.conf
put 0644 99-deskfarm.rules /etc/udev/rules.d/99-deskfarm.rules
put 0644 xorg.conf /etc/X11/xorg.conf.d/10-deskfarm.conf
put 0755 deskfarm-session /usr/local/bin/deskfarm-session
put 0755 deskfarm-autostart /usr/local/bin/deskfarm-autostart
put 0755 deskfarm-screen /usr/local/bin/deskfarm-screen
put 0755 deskfarm-guestd /usr/local/bin/deskfarm-guestd
put 0644 deskfarm-guestd.service /etc/systemd/system/deskfarm-guestd.service

home=/home/user
put 0644 bash_profile $home/.bash_profile
put 0644 xinitrc $home/.xinitrc
put 0644 rc.xml $home/.config/openbox/rc.xml
put 0644 menu.xml $home/.config/openbox/menu.xml
put 0644 panel $home/.config/lxpanel/deskfarm/panels/panel
put 0644 lxpanel.conf $home/.config/lxpanel/deskfarm/config
put 0644 pcmanfm.conf $home/.config/pcmanfm/deskfarm/pcmanfm.conf
put 0644 desktop-items-0.conf $home/.config/pcmanfm/deskfarm/desktop-items-0.conf
put 0644 libfm.conf $home/.config/libfm/libfm.conf
put 0644 registrymodifications.xcu $home/.config/libreoffice/4/user/registrymodifications.xcu
# Firefox's first start opens no welcome, privacy-notice or what's-new page
# and reaches for no network (telemetry, studies, updates, captive-portal
# and connectivity checks, Safe Browsing lists): the guest has none by
# default, and each would cost an agent a screenshot or a timeout.
if [ -e "$root/usr/lib/firefox-esr/firefox-esr" ]; then
	put 0644 firefox-policies.json /usr/lib/firefox-esr/distribution/policies.json
fi
mkdir -p "$root$home/Desktop"
variant_configure
in_root chown -R user:user $home

# Every panel launcher must name an installed desktop file: the launchers
# are what agents click, so a renamed package fails the build, not an agent.
for id in $(sed -n 's/^ *id=\(.*\.desktop\)$/\1/p' "$root$home/.config/lxpanel/deskfarm/panels/panel"); do
	if [ ! -e "$root/usr/share/applications/$id" ]; then
		echo "build.sh: the panel's launcher $id is not installed" >&2
		exit 1
	fi
done

in_root systemctl mask "${masked_units[@]}"
mkdir -p "$root/etc/systemd/system-generators"
for g in "${masked_generators[@]}"; do
	ln -sf /dev/null "$root/etc/systemd/system-generators/$g"
done
in_root systemctl set-default multi-user.target
in_root systemctl enable deskfarm-guestd.service

# The kernel's postinst built the initramfs with the hook above; check it.
kver=$(basename "$(ls -d "$root"/lib/modules/*)")
initrd_files=$(in_root lsinitramfs "/boot/initrd.img-$kver")
for m in virtio_pci virtio_blk ext4; do
	if ! grep -q "/$m.ko" <<<"$initrd_files"; then
		echo "build.sh: initramfs lacks $m" >&2
		exit 1
	fi
done

if declare -F variant_check >/dev/null; then
	step "check the $image image's commands"
	variant_check
fi

step "clean up the root file system"
for d in "${pruned_modules[@]}"; do
	rm -rf "$root/lib/modules/$kver/kernel/$d"
done
in_root depmod -a "$kver"
rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/dpkg/dpkg.cfg.d/deskfarm-unsafe-io"
in_root apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
	"$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
	"$root"/var/log/apt/* "$root"/tmp/* "$root"/var/tmp/* \
	"$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/lintian
# What debootstrap unpacked before dpkg-nodoc was in place.
find "$root/usr/share/doc" -type f ! -name copyright -delete
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
find "$root/var/log" -type f -exec truncate -s 0 {} +
# mkfs.ext4 -d keeps whole seconds of timestamps only, while fontconfig's
# caches record the font directories' mtimes to the nanosecond: truncate
# those and rebuild the caches, or every session rebuilds them at login
# (seconds of CPU under TCG).
find "$root/usr/share/fonts" "$root/usr/local/share/fonts" -type d 2>/dev/null |
	while read -r d; do touch -m -d "@$(stat -c %Y "$d")" "$d"; done
in_root fc-cache -s -f
unmount_all

step "make the ext4 file system"
rm -f "$work/disk.raw"
truncate -s "$disk_size" "$work/disk.raw"
# Initialise inode tables and journal now: otherwise the guest kernel does
# it in the background on every first boot, writing into each VM's overlay.
mkfs.ext4 -q -F -L deskfarm-root -d "$root" \
	-E lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0 "$work/disk.raw"

step "convert to qcow2, copy kernel and initrd"
qemu-img convert -f raw -O qcow2 "$work/disk.raw" "$out/disk.qcow2"
rm -f "$work/disk.raw"
cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$out/initrd.img"
# console=ttyS0: boot messages for whoever logs the serial port. Under TCG
# the CPU does not speculate, so the mitigations only cost time.
echo "root=/dev/vda rw rootfstype=ext4 console=ttyS0 quiet loglevel=3 mitigations=off" >"$out/cmdline"
echo "built $suite $image image: kernel $kver, $(du -sh "$out/disk.qcow2" | cut -f1) qcow2"
