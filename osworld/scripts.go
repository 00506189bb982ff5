package osworld

import _ "embed"

// listDirScript prints /list_directory's tree as JSON (python3 - PATH): an
// unreadable directory becomes {"error": "..."} as os.listdir failing does
// in OSWorld's server; exit 3 when PATH is not a directory.
const listDirScript = `import json, os, sys
def walk(d):
    tree = {"type": "directory", "name": os.path.basename(d), "children": []}
    try:
        for e in os.listdir(d):
            full = os.path.join(d, e)
            if os.path.isdir(full):
                tree["children"].append(walk(full))
            else:
                tree["children"].append({"type": "file", "name": e})
    except OSError as exc:
        tree = {"error": str(exc)}
    return tree
p = sys.argv[1]
if not os.path.isdir(p):
    sys.exit(3)
json.dump(walk(p), sys.stdout)
`

// windowsScript lists top-level windows for parseWindows: wmctrl where the
// image has it (the osworld image), else xdotool (the desktop image).
const windowsScript = `if command -v wmctrl >/dev/null 2>&1; then
	echo wmctrl; exec wmctrl -l
fi
echo xdotool
for w in $(xdotool search --onlyvisible --name . 2>/dev/null); do
	printf '%s\t%s\n' "$w" "$(xdotool getwindowname "$w" 2>/dev/null)"
done`

// activateIDScript raises and focuses window $1 (an id from windowsScript).
const activateIDScript = `if command -v wmctrl >/dev/null 2>&1; then exec wmctrl -i -a "$1"; fi
exec xdotool windowactivate "$1"`

// windowActionScript is wmctrl's -a/-c with the -x (class) and -F (exact)
// flags of OSWorld's activate_window and close_window ($1 action a or c,
// $2 flags, $3 name). Without wmctrl, xdotool does the same for the first
// match: a title (or class) regex made of the escaped name ($4), anchored
// when strict.
const windowActionScript = `action=$1 flags=$2 name=$3 re=$4
if command -v wmctrl >/dev/null 2>&1; then exec wmctrl "-$flags$action" "$name"; fi
case $flags in *x*) by=--class ;; *) by=--name ;; esac
w=$(xdotool search --onlyvisible $by "$re" 2>/dev/null | head -n 1)
[ -n "$w" ] || exit 1
if [ "$action" = a ]; then exec xdotool windowactivate "$w"; fi
exec xdotool windowkill "$w"`

// windowSizeScript prints the size of the first managed window whose
// WM_CLASS instance or class is $1, case-insensitively (OSWorld's server
// walks _NET_CLIENT_LIST), as xdotool's WIDTH= and HEIGHT= lines; exit 3
// when none matches. wmctrl -lx lists the managed windows with their
// class; without it (the desktop image), xdotool's visible windows of that
// class ($2: an anchored, escaped regex; xdotool matches case-insensitively).
const windowSizeScript = `if command -v wmctrl >/dev/null 2>&1; then
	ids=$(wmctrl -lx | awk -v n="$1" '{ split($3, c, "."); if (tolower(c[1]) == tolower(n) || tolower(c[2]) == tolower(n)) print $1 }')
else
	ids=$(xdotool search --onlyvisible --classname "$2" 2>/dev/null; xdotool search --onlyvisible --class "$2" 2>/dev/null)
fi
for w in $ids; do
	xdotool getwindowgeometry --shell "$w" 2>/dev/null && exit 0
done
exit 3`

// wallpaperScript prints the wallpaper's path: GNOME's picture-uri when
// gsettings has one that exists, else pcmanfm's desktop setting (the
// images' desktop is pcmanfm's).
const wallpaperScript = `norm() { p=$(printf '%s' "$1" | sed "s/^'//; s/'$//; s|^file://||"); [ -n "$p" ] && [ -e "$p" ] && printf '%s\n' "$p"; }
if command -v gsettings >/dev/null 2>&1; then
	norm "$(gsettings get org.gnome.desktop.background picture-uri 2>/dev/null)" && exit 0
fi
for f in "$HOME"/.config/pcmanfm/*/desktop-items-0.conf; do
	[ -r "$f" ] || continue
	norm "$(sed -n 's/^wallpaper=//p' "$f" | head -n 1)" && exit 0
done
exit 3`

// setWallpaperScript sets $1 as the wallpaper: pcmanfm's when its desktop
// runs, else GNOME's.
const setWallpaperScript = `if pgrep -u "$(id -u)" -x pcmanfm >/dev/null 2>&1; then
	exec pcmanfm --set-wallpaper="$1" --wallpaper-mode=stretch
fi
exec gsettings set org.gnome.desktop.background picture-uri "file://$1"`

// launchScript starts "$@" in its own session with no ties to the exec
// (stdio on /dev/null, setsid -f), so it outlives the guest agent's command
// and the agent does not wait for its output.
const launchScript = `setsid -f "$@" </dev/null >/dev/null 2>&1`

// openScript opens $1 with the desktop's opener, detached like launchScript.
const openScript = `if command -v xdg-open >/dev/null 2>&1; then
	setsid -f xdg-open "$1" </dev/null >/dev/null 2>&1
else
	setsid -f pcmanfm "$1" </dev/null >/dev/null 2>&1
fi`

// existsScript exits 0 when $1 exists, 4 when it names a program on PATH,
// 3 otherwise.
const existsScript = `[ -e "$1" ] && exit 0
command -v "$1" >/dev/null 2>&1 && exit 4
exit 3`

// downloadScript is /setup/download_file's download (python3 - URL PATH):
// OSWorld's three attempts with the standard library, run in the guest as
// the desktop user, so the file is the user's and the guest's network
// decides what it reaches.
//
//go:embed download.py
var downloadScript []byte
