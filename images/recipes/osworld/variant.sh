# variant.sh makes the desktop recipe's build.sh build the "osworld" image;
# that script sources it (see its DESKFARM_VARIANT_DIR) with this
# directory's files taking precedence over the desktop's in put.
# shellcheck shell=bash disable=SC2034 # the variables are build.sh's

image=osworld
# LibreOffice, Chromium, GIMP and Thunderbird need the room.
disk_size=10G
# OSWorld's client password: task steps run sudo -S with it.
password=password
# gnome-terminal and the apps below replace lxterminal and mousepad.
session_packages=(openbox lxpanel pcmanfm)
extra_packages=(
	# OSWorld's apps (Google Chrome and VS Code are not Debian packages)
	chromium chromium-sandbox
	libreoffice-calc libreoffice-writer libreoffice-impress libreoffice-gtk3
	libreoffice-style-colibre fonts-liberation2 fonts-crosextra-carlito
	fonts-crosextra-caladea
	gimp vlc vlc-data thunderbird
	gnome-terminal xterm nautilus
	dconf-gsettings-backend dconf-service libglib2.0-bin
	# tools the tasks call
	socat wmctrl x11-utils xsel
	# accessibility: the AT-SPI bus and the GTK 2/3 bridges (libatk-adaptor
	# also holds GTK 2's atk-bridge module, libgail-common its gail)
	at-spi2-core libatk-adaptor libgail-common
	# python as OSWorld's commands call it, and what pyautogui-style code imports
	python-is-python3 python3-xlib python3-pil python3-pyatspi python3-pyperclip
)

variant_configure() {
	put 0755 google-chrome /usr/local/bin/google-chrome
	ln -sf google-chrome "$root/usr/local/bin/google-chrome-stable"
	put 0644 deskfarm.gschema.override /usr/share/glib-2.0/schemas/90_deskfarm.gschema.override
	in_root glib-compile-schemas /usr/share/glib-2.0/schemas
	# deskfarm's pyautogui, where python3 finds local modules.
	local site
	site=$(in_root python3 -c 'import sys; print("/usr/local/lib/python3.%d/dist-packages" % sys.version_info[1])')
	put 0644 pyautogui.py "$site/pyautogui.py"
	put 0644 vlcrc $home/.config/vlc/vlcrc
	local d
	for d in Documents Downloads Music Pictures Public Templates Videos; do
		mkdir -p "$root$home/$d"
	done
}

# variant_check runs each command OSWorld's tasks rely on in the chroot (no
# display): a missing package or a broken wrapper fails the build here
# rather than in a task.
variant_check() {
	check() {
		echo "check: $*"
		if ! in_root "$@" >"$work/check.out" 2>&1; then
			cat "$work/check.out" >&2
			echo "build.sh: check failed: $*" >&2
			exit 1
		fi
		head -n 3 "$work/check.out"
	}
	# As the user, with a throwaway HOME: VLC refuses root, and none may
	# leave a profile behind in the image.
	local as_user=(runuser -u user -- env HOME=/tmp/check-home)
	check python -c 'import pyautogui, Xlib, PIL, pyatspi, pyperclip; print(pyautogui.__file__)'
	check "${as_user[@]}" google-chrome --version
	check "${as_user[@]}" vlc --version
	check "${as_user[@]}" libreoffice --version
	check "${as_user[@]}" gimp --version
	check "${as_user[@]}" thunderbird --version
	check sh -c 'command -v wmctrl xdotool socat xterm gnome-terminal nautilus sudo'
	check ls /usr/lib/x86_64-linux-gnu/vlc/lua/intf/http.luac /usr/share/vlc/lua/http/requests/status.xml
	check sh -c 'echo password | runuser -u user -- sudo -S -k true'
	rm -rf "$root/home/user/.sudo_as_admin_successful" "$root/tmp/check-home"
}
