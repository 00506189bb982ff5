#!/usr/bin/env bash
# build.sh OUTDIR builds deskfarm's "osworld" image: the desktop image's
# light session (Xorg on bochs-drm, openbox, lxpanel, pcmanfm; user "user"
# logged in automatically; the QEMU guest agent; deskfarm-guestd and the
# readiness signal on the virtio-serial port org.deskfarm.session.0) plus
# what OSWorld's tasks (github.com/xlang-ai/OSWorld) run, from Debian
# packages, and VS Code from the npm registry (code-server.sh):
#   Chromium behind a google-chrome command, VS Code (code-server on
#   Debian's Node.js) behind a code command, LibreOffice Calc/Writer/Impress,
#   GIMP, VLC with its HTTP interface on :8080 (password "password"),
#   Thunderbird, gnome-terminal, xterm, nautilus, socat, wmctrl, xdotool,
#   the AT-SPI stack with accessibility on, python (= python3) with Xlib,
#   PIL, pyatspi, pyperclip, and deskfarm's own pyautogui-compatible module
#   (pyautogui.py; PyAutoGUI itself is not a Debian package).
# The screen is 1920x1080 unless deskfarm.screen=WxH says otherwise. The
# user's password is "password" (OSWorld's client password) for sudo -S.
#
# This recipe's base is desktop (the file "base"): the image builder hands
# the desktop recipe's files over as DESKFARM_BASE_DIR, and this runs the
# desktop's build.sh with this directory as its variant (variant.sh). Only
# what differs lives here: deskfarm-session, rc.xml, menu.xml, panel,
# lxpanel.conf and libfm.conf are the desktop's, changed for the terminal,
# the apps, accessibility and the screen size; the rest is the apps' own.
# A change to the desktop recipe changes this image's hash too.
set -euo pipefail
base=${DESKFARM_BASE_DIR:?DESKFARM_BASE_DIR is not set (the images package sets it from the file "base")}
DESKFARM_VARIANT_DIR=${DESKFARM_RECIPE_DIR:?DESKFARM_RECIPE_DIR is not set} \
	DESKFARM_RECIPE_DIR=$base exec bash "$base/build.sh" "$@"
