# variant.sh makes the desktop recipe's build.sh build the "osworld" image;
# that script sources it (see its DESKFARM_VARIANT_DIR) with this
# directory's files taking precedence over the desktop's in put.
# shellcheck shell=bash disable=SC2034 # the variables are build.sh's

image=osworld
# LibreOffice, Chromium, GIMP and Thunderbird need the room.
disk_size=10G
# OSWorld's client password: task steps run sudo -S with it.
password=password
# The time zone (see variant_configure).
timezone=America/Los_Angeles
# gnome-terminal and the apps below replace lxterminal and mousepad.
session_packages=(openbox lxpanel pcmanfm)
extra_packages=(
	# OSWorld's apps (Google Chrome and VS Code are not Debian packages:
	# Chromium stands in for one, code-server from npm on Debian's Node.js
	# for the other; code-server.sh)
	chromium chromium-sandbox nodejs ripgrep
	libreoffice-calc libreoffice-writer libreoffice-impress libreoffice-gtk3
	libreoffice-style-colibre fonts-liberation2 fonts-crosextra-carlito
	fonts-crosextra-caladea
	gimp vlc vlc-data thunderbird
	gnome-terminal xterm nautilus
	dconf-gsettings-backend dconf-service libglib2.0-bin
	# Ubuntu's video player, the default for video/* (mimeapps.list): the
	# state OSWorld's "make VLC the default" task starts from
	totem
	# tools the tasks call
	socat wmctrl x11-utils xsel xdg-utils
	# tools that Ubuntu's desktop has and tasks call (unzip in 14 tasks,
	# xz in 6, pip in 4, jq in 3; the graders' shell commands use bc);
	# pip has no index to install from in the guest, but tasks call it
	unzip zip xz-utils jq git bc python3-pip tzdata
	# sound: a PulseAudio server on a null sink (the VM has no sound card)
	# and pactl
	pulseaudio pulseaudio-utils
	# the GSettings schemas graders read with gsettings: org.gnome.shell,
	# org.gnome.settings-daemon.*, org.gnome.desktop.* (wallpaper, a11y,
	# magnifier, notifications, screensaver, interface)
	gnome-shell-common gnome-settings-daemon-common gsettings-desktop-schemas
	# accessibility: the AT-SPI bus and the GTK 2/3 bridges (libatk-adaptor
	# also holds GTK 2's atk-bridge module, libgail-common its gail)
	at-spi2-core libatk-adaptor libgail-common
	# python as OSWorld's commands call it, and what pyautogui-style code imports
	python-is-python3 python3-xlib python3-pil python3-pyatspi python3-pyperclip
)

variant_configure() {
	put 0755 google-chrome /usr/local/bin/google-chrome
	ln -sf google-chrome "$root/usr/local/bin/google-chrome-stable"
	# Chrome's window titles ("… - Google Chrome") and UI text, from
	# Chromium's locale packs (chrome-names.py).
	python3 "$variant/chrome-names.py" "$root"/usr/lib/chromium/locales/*.pak
	put 0644 google-chrome.desktop /usr/share/applications/google-chrome.desktop
	put 0644 mimeapps.list /usr/share/applications/mimeapps.list
	put 0644 thunderbird-prefs.js /etc/thunderbird/pref/deskfarm.js
	# OSWorld's Ubuntu image is not on UTC: "set my time zone to UTC+0"
	# must not pass untouched. Which zone it uses is not published; this is
	# a documented non-UTC one.
	ln -sf /usr/share/zoneinfo/$timezone "$root/etc/localtime"
	echo "$timezone" >"$root/etc/timezone"
	put 0644 deskfarm.gschema.override /usr/share/glib-2.0/schemas/90_deskfarm.gschema.override
	in_root glib-compile-schemas /usr/share/glib-2.0/schemas
	# deskfarm's pyautogui, where python3 finds local modules.
	local site
	site=$(in_root python3 -c 'import sys; print("/usr/local/lib/python3.%d/dist-packages" % sys.version_info[1])')
	put 0644 pyautogui.py "$site/pyautogui.py"
	put 0755 deskfarm-office-origin /usr/local/bin/deskfarm-office-origin
	put 0644 vlcrc $home/.config/vlc/vlcrc
	# VS Code (code-server.sh builds it on this host; the code command
	# maps VS Code's paths onto it).
	bash "$variant/code-server.sh" "$work/code-server"
	rm -rf "$root/usr/lib/code-server"
	cp -a "$work/code-server" "$root/usr/lib/code-server"
	chown -R root:root "$root/usr/lib/code-server"
	rm -rf "$work/code-server"
	put 0644 code-server-config.yaml /usr/lib/code-server/deskfarm-config.yaml
	put 0755 code /usr/local/bin/code
	put 0644 code.desktop /usr/share/applications/code.desktop
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
	check python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read()); print("parsed", sys.argv[1])' /usr/local/bin/deskfarm-office-origin
	check "${as_user[@]}" google-chrome --version
	check "${as_user[@]}" vlc --version
	check "${as_user[@]}" libreoffice --version
	check "${as_user[@]}" gimp --version
	check "${as_user[@]}" thunderbird --version
	check sh -c 'command -v wmctrl xdotool socat xterm gnome-terminal nautilus sudo'
	check ls /usr/lib/x86_64-linux-gnu/vlc/lua/intf/http.luac /usr/share/vlc/lua/http/requests/status.xml
	check sh -c 'echo password | runuser -u user -- sudo -S -k true'
	check sh -c 'unzip -v && zip -v && xz --version && jq --version && git --version && echo 2+2 | bc && pip --version'
	check sh -c 'pulseaudio --version && pactl --version'
	check totem --version
	# VS Code: its CLI runs on the guest's Node (the native modules load:
	# --list-extensions opens spdlog's log) and answers VS Code's version.
	check "${as_user[@]}" sh -c 'code --version | grep -Fx 1.87.0 && code --list-extensions'
	# Its native modules, built on the build host against Node-API, load
	# in the guest's Node.
	check node -e 'for (const m of ["node-pty", "@vscode/spdlog", "native-watchdog", "@parcel/watcher"]) { require("/usr/lib/code-server/lib/vscode/node_modules/" + m); console.log("loaded", m, "in node", process.version) }; require("/usr/lib/code-server/node_modules/argon2")'
	check sh -c 'xdg-mime query default video/mp4 | grep -Fx org.gnome.Totem.desktop'
	check sh -c 'test "$(date +%Z)" != UTC && date +%Z && cat /etc/timezone'
	# Each schema a grader reads, and the key it reads.
	check gsettings get org.gnome.shell favorite-apps
	check gsettings get org.gnome.desktop.interface text-scaling-factor
	check gsettings get org.gnome.desktop.a11y.applications screen-magnifier-enabled
	check gsettings get org.gnome.desktop.a11y.magnifier mag-factor
	check gsettings get org.gnome.desktop.notifications show-banners
	check gsettings get org.gnome.desktop.screensaver lock-enabled
	check gsettings get org.gnome.desktop.background picture-uri
	check gsettings list-keys org.gnome.settings-daemon.plugins.media-keys
	check sh -c 'grep -l suppress_dialog_on_startup /usr/lib/thunderbird/defaults/syspref/*.js'
	rm -rf "$root/home/user/.sudo_as_admin_successful" "$root/tmp/check-home"
}
