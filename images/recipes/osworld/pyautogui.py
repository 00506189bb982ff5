"""deskfarm's pyautogui-compatible module for the osworld image.

OSWorld (github.com/xlang-ai/OSWorld) sends every agent action, and many
task setup and grading steps, as ``python -c "import pyautogui; ..."`` to
the guest. PyAutoGUI is not a Debian package and the guest has no network,
so this module, written for deskfarm, provides the part of PyAutoGUI's API
that agents and OSWorld's task configs use, on X11 through python3-xlib:

* input goes through the XTEST extension (as if from a real device), so
  the window manager and every toolkit see ordinary events;
* the pointer position and screen size come from core X requests;
* screenshots are read from the root window (no cursor, like PyAutoGUI's
  scrot backend) and returned as PIL images;
* the display is $DISPLAY, or :0 (the session's) when it is unset.

Text types exactly, whatever the keyboard layout: a character whose keysym
is on the keymap is typed with its keycode (plus Shift for the second
level); any other character is bound for the time of the call to a keycode
that has no symbols, typed, and the keycode is unbound again (as xdotool
does).

Covered: the mouse (moveTo, moveRel/move, dragTo, dragRel/drag, click,
leftClick, doubleClick, tripleClick, rightClick, middleClick, mouseDown,
mouseUp, scroll, vscroll, hscroll, with duration and tweens), the keyboard
(typewrite/write, press, hotkey, keyDown, keyUp, hold; unknown key names
are ignored, as PyAutoGUI does, with a note on stderr), position, size,
onScreen, screenshot, pixel, pixelMatchesColor, sleep, FAILSAFE, PAUSE,
KEYBOARD_KEYS/KEY_NAMES and the tween functions (pytweening's names).

Not implemented (each raises NotImplementedError): image location
(locateOnScreen and friends, and x/y given as an image file name), message
boxes (alert, confirm, prompt, password), and the PyAutoGUI logging of
screenshots (logScreenshot is accepted and ignored), multiple monitors
(allScreens), and "fn", which has no X keysym.
"""

import collections
import contextlib
import math
import os
import sys
import threading
import time

# python-xlib is imported lazily: "import pyautogui" must work without a
# display (OSWorld prepends it to every command, even those that only print
# a path).

__version__ = "0.9.54+deskfarm"  # the PyAutoGUI API version this follows

# --- settings, as in PyAutoGUI --------------------------------------------

FAILSAFE = True
FAILSAFE_POINTS = [(0, 0)]
PAUSE = 0.1  # seconds slept after each call
MINIMUM_DURATION = 0.1  # shorter moves are instant
MINIMUM_SLEEP = 0.05  # the shortest sleep between the steps of a move
# How long an unmapped character's temporary keycode stays bound after its
# last use before it is unbound: clients read the new mapping when they get
# the MappingNotify, which may be after the key events were sent.
REMAP_SETTLE = 0.1

LEFT, MIDDLE, RIGHT, PRIMARY, SECONDARY = "left", "middle", "right", "primary", "secondary"

Point = collections.namedtuple("Point", "x y")
Size = collections.namedtuple("Size", "width height")


class PyAutoGUIException(Exception):
    """Raised for bad arguments and for what the X server cannot do."""


class FailSafeException(PyAutoGUIException):
    """Raised when FAILSAFE is on and the pointer is in a FAILSAFE_POINTS corner."""


class _UnknownKey(PyAutoGUIException):
    """A key name that is not one of PyAutoGUI's, or that X cannot name."""


class ImageNotFoundException(PyAutoGUIException):
    """PyAutoGUI's exception for image location, which is not implemented here."""


KEY_NAMES = [
    "\t", "\n", "\r", " ", "!", '"', "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-", ".", "/",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ":", ";", "<", "=", ">", "?", "@",
    "[", "\\", "]", "^", "_", "`",
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q", "r", "s",
    "t", "u", "v", "w", "x", "y", "z", "{", "|", "}", "~",
    "accept", "add", "alt", "altleft", "altright", "apps", "backspace",
    "browserback", "browserfavorites", "browserforward", "browserhome", "browserrefresh",
    "browsersearch", "browserstop", "capslock", "clear", "convert", "ctrl", "ctrlleft", "ctrlright",
    "decimal", "del", "delete", "divide", "down", "end", "enter", "esc", "escape", "execute",
    "f1", "f10", "f11", "f12", "f13", "f14", "f15", "f16", "f17", "f18", "f19",
    "f2", "f20", "f21", "f22", "f23", "f24", "f3", "f4", "f5", "f6", "f7", "f8", "f9",
    "final", "fn", "hanguel", "hangul", "hanja", "help", "home", "insert", "junja", "kana", "kanji",
    "launchapp1", "launchapp2", "launchmail", "launchmediaselect", "left", "modechange", "multiply",
    "nexttrack", "nonconvert", "num0", "num1", "num2", "num3", "num4", "num5", "num6", "num7", "num8",
    "num9", "numlock", "pagedown", "pageup", "pause", "pgdn", "pgup", "playpause", "prevtrack",
    "print", "printscreen", "prntscrn", "prtsc", "prtscr", "return", "right", "scrolllock", "select",
    "separator", "shift", "shiftleft", "shiftright", "sleep", "space", "stop", "subtract", "tab",
    "up", "volumedown", "volumemute", "volumeup", "win", "winleft", "winright", "yen",
    "command", "option", "optionleft", "optionright",
]
KEYBOARD_KEYS = KEY_NAMES

# X keysym names of PyAutoGUI's key names (characters map to their own
# keysym, see _keysym). "fn" has no X keysym; macOS names map to their PC
# counterparts.
_KEYSYM_NAMES = {
    "\t": "Tab", "\n": "Return", "\r": "Return", " ": "space",
    "accept": "Execute", "add": "KP_Add", "alt": "Alt_L", "altleft": "Alt_L", "altright": "Alt_R",
    "apps": "Menu", "backspace": "BackSpace",
    "browserback": "XF86_Back", "browserfavorites": "XF86_Favorites", "browserforward": "XF86_Forward",
    "browserhome": "XF86_HomePage", "browserrefresh": "XF86_Refresh", "browsersearch": "XF86_Search",
    "browserstop": "XF86_Stop", "capslock": "Caps_Lock", "clear": "Clear", "convert": "Henkan",
    "ctrl": "Control_L", "ctrlleft": "Control_L", "ctrlright": "Control_R",
    "decimal": "KP_Decimal", "del": "Delete", "delete": "Delete", "divide": "KP_Divide",
    "down": "Down", "end": "End", "enter": "Return", "esc": "Escape", "escape": "Escape",
    "execute": "Execute", "final": "Kanji", "hanguel": "Hangul", "hangul": "Hangul",
    "hanja": "Hangul_Hanja", "help": "Help", "home": "Home", "insert": "Insert", "junja": "Hangul_Jeonja",
    "kana": "Katakana", "kanji": "Kanji", "launchapp1": "XF86_Launch0", "launchapp2": "XF86_Launch1",
    "launchmail": "XF86_Mail", "launchmediaselect": "XF86_AudioMedia", "left": "Left",
    "modechange": "Mode_switch", "multiply": "KP_Multiply", "nexttrack": "XF86_AudioNext",
    "nonconvert": "Muhenkan", "numlock": "Num_Lock", "pagedown": "Next", "pageup": "Prior",
    "pause": "Pause", "pgdn": "Next", "pgup": "Prior", "playpause": "XF86_AudioPlay",
    "prevtrack": "XF86_AudioPrev", "print": "Print", "printscreen": "Print", "prntscrn": "Print",
    "prtsc": "Print", "prtscr": "Print", "return": "Return", "right": "Right",
    "scrolllock": "Scroll_Lock", "select": "Select", "separator": "KP_Separator", "shift": "Shift_L",
    "shiftleft": "Shift_L", "shiftright": "Shift_R", "sleep": "XF86_Sleep", "space": "space",
    "stop": "XF86_AudioStop", "subtract": "KP_Subtract", "tab": "Tab", "up": "Up",
    "volumedown": "XF86_AudioLowerVolume", "volumemute": "XF86_AudioMute",
    "volumeup": "XF86_AudioRaiseVolume", "win": "Super_L", "winleft": "Super_L", "winright": "Super_R",
    "yen": "yen", "command": "Super_L", "option": "Alt_L", "optionleft": "Alt_L", "optionright": "Alt_R",
}
_KEYSYM_NAMES.update({"f%d" % i: "F%d" % i for i in range(1, 25)})
_KEYSYM_NAMES.update({"num%d" % i: "KP_%d" % i for i in range(10)})

# --- the X connection -----------------------------------------------------

_lock = threading.RLock()
_conn = None


def _x():
    """The module's X connection, opened on first use, with XTEST checked."""
    global _conn
    with _lock:
        if _conn is None:
            from Xlib import display as xdisplay

            # The session's display when DISPLAY is unset (OSWorld's own
            # server runs with DISPLAY=:0).
            d = xdisplay.Display(os.environ.get("DISPLAY") or ":0")
            if not d.query_extension("XTEST").present:
                d.close()
                raise PyAutoGUIException("the X server has no XTEST extension")
            _conn = d
        return _conn


def _root():
    return _x().screen().root


def _fake(event_type, detail=0, x=0, y=0):
    from Xlib.ext import xtest

    d = _x()
    if event_type == _MOTION:
        xtest.fake_input(d, event_type, detail=0, root=_root(), x=x, y=y)
    else:
        xtest.fake_input(d, event_type, detail=detail)
    d.sync()


# Xlib.X event codes, fixed by the protocol.
_KEY_PRESS, _KEY_RELEASE, _BUTTON_PRESS, _BUTTON_RELEASE, _MOTION = 2, 3, 4, 5, 6

# --- helpers --------------------------------------------------------------


def sleep(seconds):
    """time.sleep, which PyAutoGUI also exports."""
    time.sleep(seconds)


def _autopause(pause):
    """Sleeps PAUSE after a call, as PyAutoGUI does, unless _pause=False."""
    if pause and PAUSE:
        time.sleep(PAUSE)


def _failsafe_check():
    if FAILSAFE and tuple(position()) in [tuple(p) for p in FAILSAFE_POINTS]:
        raise FailSafeException(
            "PyAutoGUI fail-safe triggered from mouse moving to a corner of the screen. "
            "To disable this fail-safe, set pyautogui.FAILSAFE to False."
        )


def _int(v):
    # PyAutoGUI truncates float coordinates.
    return int(v)


def _point(x, y):
    """Normalises PyAutoGUI's coordinate arguments: x may be an (x, y)
    sequence; None keeps the current coordinate."""
    if isinstance(x, str):
        raise NotImplementedError("locating an image on the screen is not implemented in deskfarm's pyautogui")
    if isinstance(x, (tuple, list, Point)):
        if len(x) != 2:
            raise PyAutoGUIException("a point must have two coordinates, got %r" % (x,))
        x, y = x
    cur = position()
    return Point(cur.x if x is None else _int(x), cur.y if y is None else _int(y))


def _button(button):
    b = str(button).lower() if not isinstance(button, int) else button
    table = {LEFT: 1, MIDDLE: 2, RIGHT: 3, PRIMARY: 1, SECONDARY: 3, 1: 1, 2: 2, 3: 3,
             "1": 1, "2": 2, "3": 3, 4: 4, 5: 5, 6: 6, 7: 7}
    if b not in table:
        raise PyAutoGUIException("button must be left, middle, right, primary, secondary or 1-7, not %r" % (button,))
    return table[b]


# --- screen and pointer ---------------------------------------------------


def size():
    """The screen size in pixels, Size(width, height)."""
    # The root window's geometry follows RandR changes; the connection's
    # screen info is as of connecting.
    g = _root().get_geometry()
    return Size(g.width, g.height)


resolution = size


def position(x=None, y=None):
    """The pointer position, Point(x, y); a given x or y replaces the pointer's."""
    p = _root().query_pointer()
    return Point(p.root_x if x is None else _int(x), p.root_y if y is None else _int(y))


def onScreen(x, y=None):
    """Whether the point is on the screen."""
    if isinstance(x, (tuple, list, Point)):
        x, y = x
    w, h = size()
    return 0 <= _int(x) < w and 0 <= _int(y) < h


def _clamp(x, y):
    w, h = size()
    return min(max(_int(x), 0), w - 1), min(max(_int(y), 0), h - 1)


def _move(x, y, duration, tween):
    """Moves the pointer in steps along tween, instantly for short durations."""
    sx, sy = position()
    steps = []
    if duration and duration > MINIMUM_DURATION and (sx, sy) != (x, y):
        n = max(abs(x - sx), abs(y - sy))
        if duration / n < MINIMUM_SLEEP:
            n = max(int(duration / MINIMUM_SLEEP), 1)
        for i in range(n):
            t = tween(i / n)
            steps.append(_clamp(sx + (x - sx) * t, sy + (y - sy) * t))
    pause = duration / len(steps) if steps else 0
    steps.append(_clamp(x, y))
    for px, py in steps:
        _fake(_MOTION, x=px, y=py)
        if pause:
            time.sleep(pause)


def moveTo(x=None, y=None, duration=0.0, tween=None, logScreenshot=False, _pause=True):
    """Moves the pointer to (x, y), over duration seconds along tween."""
    _failsafe_check()
    p = _point(x, y)
    _move(p.x, p.y, duration, tween or linear)
    _autopause(_pause)


def moveRel(xOffset=None, yOffset=None, duration=0.0, tween=None, logScreenshot=False, _pause=True):
    """Moves the pointer by (xOffset, yOffset)."""
    _failsafe_check()
    if isinstance(xOffset, (tuple, list, Point)):
        xOffset, yOffset = xOffset
    cur = position()
    _move(cur.x + _int(xOffset or 0), cur.y + _int(yOffset or 0), duration, tween or linear)
    _autopause(_pause)


move = moveRel


def mouseDown(x=None, y=None, button=PRIMARY, duration=0.0, tween=None, logScreenshot=False, _pause=True):
    """Presses a mouse button, after moving to (x, y) if given."""
    b = _button(button)
    _failsafe_check()
    if x is not None or y is not None:
        p = _point(x, y)
        _move(p.x, p.y, duration, tween or linear)
    _fake(_BUTTON_PRESS, b)
    _autopause(_pause)


def mouseUp(x=None, y=None, button=PRIMARY, duration=0.0, tween=None, logScreenshot=False, _pause=True):
    """Releases a mouse button, after moving to (x, y) if given."""
    b = _button(button)
    _failsafe_check()
    if x is not None or y is not None:
        p = _point(x, y)
        _move(p.x, p.y, duration, tween or linear)
    _fake(_BUTTON_RELEASE, b)
    _autopause(_pause)


def click(x=None, y=None, clicks=1, interval=0.0, button=PRIMARY, duration=0.0, tween=None,
          logScreenshot=False, _pause=True):
    """Moves to (x, y) if given, then clicks button clicks times, interval seconds apart."""
    b = _button(button)
    _failsafe_check()
    if x is not None or y is not None:
        p = _point(x, y)
        _move(p.x, p.y, duration, tween or linear)
    for i in range(int(clicks)):
        _fake(_BUTTON_PRESS, b)
        _fake(_BUTTON_RELEASE, b)
        if interval and i < int(clicks) - 1:
            time.sleep(interval)
    _autopause(_pause)


def leftClick(x=None, y=None, interval=0.0, duration=0.0, tween=None, logScreenshot=False, _pause=True):
    click(x, y, 1, interval, LEFT, duration, tween, _pause=_pause)


def rightClick(x=None, y=None, interval=0.0, duration=0.0, tween=None, logScreenshot=False, _pause=True):
    click(x, y, 1, interval, RIGHT, duration, tween, _pause=_pause)


def middleClick(x=None, y=None, interval=0.0, duration=0.0, tween=None, logScreenshot=False, _pause=True):
    click(x, y, 1, interval, MIDDLE, duration, tween, _pause=_pause)


def doubleClick(x=None, y=None, interval=0.0, button=LEFT, duration=0.0, tween=None,
                logScreenshot=False, _pause=True):
    click(x, y, 2, interval, button, duration, tween, _pause=_pause)


def tripleClick(x=None, y=None, interval=0.0, button=LEFT, duration=0.0, tween=None,
                logScreenshot=False, _pause=True):
    click(x, y, 3, interval, button, duration, tween, _pause=_pause)


def dragTo(x=None, y=None, duration=0.0, tween=None, button=PRIMARY, logScreenshot=False, _pause=True,
           mouseDownUp=True):
    """Drags from the pointer to (x, y) holding button; with mouseDownUp=False
    only moves (the caller presses and releases)."""
    b = _button(button)
    _failsafe_check()
    p = _point(x, y)
    if mouseDownUp:
        _fake(_BUTTON_PRESS, b)
    _move(p.x, p.y, duration, tween or linear)
    if mouseDownUp:
        _fake(_BUTTON_RELEASE, b)
    _autopause(_pause)


def dragRel(xOffset=0, yOffset=0, duration=0.0, tween=None, button=PRIMARY, logScreenshot=False, _pause=True,
            mouseDownUp=True):
    """Drags by (xOffset, yOffset) from the pointer holding button."""
    if isinstance(xOffset, (tuple, list, Point)):
        xOffset, yOffset = xOffset
    cur = position()
    dragTo(cur.x + _int(xOffset or 0), cur.y + _int(yOffset or 0), duration, tween, button,
           _pause=_pause, mouseDownUp=mouseDownUp)


drag = dragRel


def _wheel(up_button, down_button, clicks, x, y, pause):
    _failsafe_check()
    if x is not None or y is not None:
        p = _point(x, y)
        _move(p.x, p.y, 0, linear)
    b = up_button if clicks > 0 else down_button
    for _ in range(abs(int(clicks))):
        _fake(_BUTTON_PRESS, b)
        _fake(_BUTTON_RELEASE, b)
    _autopause(pause)


def scroll(clicks, x=None, y=None, logScreenshot=False, _pause=True):
    """Turns the wheel: positive clicks scroll up (button 4), negative down (5)."""
    _wheel(4, 5, clicks, x, y, _pause)


vscroll = scroll


def hscroll(clicks, x=None, y=None, logScreenshot=False, _pause=True):
    """Scrolls sideways: positive clicks right (button 7), negative left (6)."""
    _wheel(7, 6, clicks, x, y, _pause)


# --- keyboard -------------------------------------------------------------


class _Keymap:
    """The server's keymap as (keycode, level) per keysym, and the keycodes
    with no symbols that can be bound to characters the keymap lacks."""

    def __init__(self, d):
        self.d = d
        first = d.display.info.min_keycode
        count = d.display.info.max_keycode - first + 1
        self.first = first
        self.rows = d.get_keyboard_mapping(first, count)
        self.spare = [first + i for i, row in enumerate(self.rows) if not any(row)]
        self.bound = collections.OrderedDict()  # keysym -> keycode, oldest first

    def find(self, keysym):
        """(keycode, level) for keysym on the first two levels, or None."""
        best = None
        for i, row in enumerate(self.rows):
            for level in (0, 1):
                if level < len(row) and row[level] == keysym:
                    if best is None or level < best[1]:
                        best = (self.first + i, level)
        if best is None and keysym in self.bound:
            best = (self.bound[keysym], 0)
        return best

    def bind(self, keysym):
        """Binds keysym to a spare keycode (reusing the oldest binding when
        none is left) and returns the keycode."""
        if keysym in self.bound:
            self.bound.move_to_end(keysym)
            return self.bound[keysym]
        if self.spare:
            kc = self.spare.pop()
        elif self.bound:
            old, kc = self.bound.popitem(last=False)
            time.sleep(REMAP_SETTLE)  # let clients act on the old binding first
        else:
            raise PyAutoGUIException("no free keycode to type keysym 0x%x" % keysym)
        self.d.change_keyboard_mapping(kc, [(keysym, keysym)])
        self.d.sync()
        self.bound[keysym] = kc
        return kc

    def unbind_all(self):
        if not self.bound:
            return
        time.sleep(REMAP_SETTLE)
        for kc in self.bound.values():
            self.d.change_keyboard_mapping(kc, [(0, 0)])
            self.spare.append(kc)
        self.d.sync()
        self.bound.clear()


_keymap = None
_keymap_users = 0


@contextlib.contextmanager
def _keyboard():
    """The keymap for one call; characters bound during it are unbound at the end."""
    global _keymap, _keymap_users
    with _lock:
        if _keymap_users == 0:
            _keymap = _Keymap(_x())
        _keymap_users += 1
        try:
            yield _keymap
        finally:
            _keymap_users -= 1
            if _keymap_users == 0:
                _keymap.unbind_all()


def _keysym(key):
    """The X keysym of a PyAutoGUI key name or a single character."""
    from Xlib import XK

    for group in ("xf86", "korean", "katakana"):  # media keys, Hangul, Kana names
        XK.load_keysym_group(group)
    if len(key) > 1:
        # PyAutoGUI takes names in any case ("Enter", "CTRL").
        xname = _KEYSYM_NAMES.get(key.lower())
        if xname is None:
            raise _UnknownKey("unknown key name %r" % key)
        ks = XK.string_to_keysym(xname)
        if not ks:
            raise _UnknownKey("X has no keysym %s for key %r" % (xname, key))
        return ks
    if key in _KEYSYM_NAMES:
        return XK.string_to_keysym(_KEYSYM_NAMES[key])
    cp = ord(key)
    if 0x20 <= cp <= 0x7E or 0xA0 <= cp <= 0xFF:
        return cp  # Latin-1 keysyms equal their code points
    return 0x01000000 + cp  # X's Unicode keysyms


def _key_event(km, key, down):
    """Presses or releases key; for a second-level keysym, Shift around a
    press. Like PyAutoGUI, an unknown key name does nothing (agents send
    names such as "ctrl+c"); unlike it, this says so on stderr."""
    try:
        ks = _keysym(key)
    except _UnknownKey as e:
        if down:
            sys.stderr.write("pyautogui: ignoring key %r: %s\n" % (key, e))
        return
    where = km.find(ks)
    if where is None:
        where = (km.bind(ks), 0)
    kc, level = where
    shift = None
    if level == 1:
        shift = km.find(_keysym("shift"))
    if down:
        if shift:
            _fake(_KEY_PRESS, shift[0])
        _fake(_KEY_PRESS, kc)
        if shift:
            _fake(_KEY_RELEASE, shift[0])
    else:
        _fake(_KEY_RELEASE, kc)


def isValidKey(key):
    return key in KEY_NAMES


def _keys_of(keys):
    """press() and hold() take one key name or a list of them."""
    return [keys] if isinstance(keys, str) else list(keys)


def keyDown(key, logScreenshot=None, _pause=True):
    """Presses key (a KEYBOARD_KEYS name or any single character) and leaves it down."""
    _failsafe_check()
    with _keyboard() as km:
        _key_event(km, key, True)
    _autopause(_pause)


def keyUp(key, logScreenshot=None, _pause=True):
    """Releases key."""
    _failsafe_check()
    with _keyboard() as km:
        _key_event(km, key, False)
    _autopause(_pause)


def press(keys, presses=1, interval=0.0, logScreenshot=None, _pause=True):
    """Presses and releases each of keys (a name or a list of names), presses times."""
    keys = _keys_of(keys)
    _failsafe_check()
    with _keyboard() as km:
        for i in range(int(presses)):
            for k in keys:
                _key_event(km, k, True)
                _key_event(km, k, False)
                if interval:
                    time.sleep(interval)
    _autopause(_pause)


def typewrite(message, interval=0.0, logScreenshot=None, _pause=True):
    """Types message: a string, character by character, or a list of key
    names pressed in turn; interval seconds after each."""
    _failsafe_check()
    with _keyboard() as km:
        for k in message:
            _key_event(km, k, True)
            _key_event(km, k, False)
            if interval:
                time.sleep(interval)
    _autopause(_pause)


write = typewrite


def hotkey(*args, **kwargs):
    """Presses the keys in order and releases them in reverse (hotkey('ctrl', 's'))."""
    interval = kwargs.get("interval", 0.0)
    keys = [k for a in args for k in ([a] if isinstance(a, str) else a)]
    _failsafe_check()
    with _keyboard() as km:
        down = []
        try:
            for k in keys:
                _key_event(km, k, True)
                down.append(k)
                if interval:
                    time.sleep(interval)
        finally:
            for k in reversed(down):
                _key_event(km, k, False)
                if interval:
                    time.sleep(interval)
    _autopause(kwargs.get("_pause", True))


shortcut = hotkey


@contextlib.contextmanager
def hold(keys, logScreenshot=None, _pause=True):
    """with hold('shift'): ... keeps keys down for the block."""
    keys = _keys_of(keys)
    for k in keys:
        keyDown(k, _pause=False)
    try:
        yield
    finally:
        for k in reversed(keys):
            keyUp(k, _pause=False)
        _autopause(_pause)


# --- screenshots ----------------------------------------------------------


def screenshot(imageFilename=None, region=None, allScreens=False):
    """The screen (or region=(left, top, width, height)) as an RGB PIL image,
    saved to imageFilename if given. The pointer is not drawn."""
    from PIL import Image

    w, h = size()
    left, top, width, height = region if region is not None else (0, 0, w, h)
    left, top, width, height = _int(left), _int(top), _int(width), _int(height)
    if width <= 0 or height <= 0 or left < 0 or top < 0 or left + width > w or top + height > h:
        raise PyAutoGUIException("region %r is not inside the %dx%d screen" % (region, w, h))
    d = _x()
    raw = _root().get_image(left, top, width, height, 2, 0xFFFFFFFF)  # 2 = ZPixmap
    bpp = next((f.bits_per_pixel for f in d.display.info.pixmap_formats if f.depth == raw.depth), None)
    if bpp != 32:
        raise PyAutoGUIException("screenshots need a 24/32-bit screen, this one has depth %d at %s bpp" % (raw.depth, bpp))
    if d.display.info.image_byte_order != 0:  # 0 = LSBFirst, pixels are B G R X in memory
        raise PyAutoGUIException("screenshots of an MSB-first X server are not implemented")
    img = Image.frombytes("RGB", (width, height), raw.data, "raw", "BGRX")
    if imageFilename:
        img.save(imageFilename)
    return img


def pixel(x, y):
    """The (r, g, b) colour of the screen at (x, y)."""
    return screenshot(region=(x, y, 1, 1)).getpixel((0, 0))


def pixelMatchesColor(x, y, expectedRGBColor, tolerance=0):
    got = pixel(x, y)
    return all(abs(g - e) <= tolerance for g, e in zip(got, expectedRGBColor[:3]))


# --- not implemented ------------------------------------------------------


def _not_implemented(name, what):
    def f(*args, **kwargs):
        raise NotImplementedError("pyautogui.%s (%s) is not implemented in deskfarm's pyautogui" % (name, what))

    f.__name__ = name
    return f


for _name in ("locateOnScreen", "locateAllOnScreen", "locateCenterOnScreen", "locate", "locateAll",
              "locateOnWindow", "center"):
    globals()[_name] = _not_implemented(_name, "image location")
for _name in ("alert", "confirm", "prompt", "password"):
    globals()[_name] = _not_implemented(_name, "message boxes")
del _name

# --- tweens (pytweening's names): n in [0, 1] -> progress, 0 -> 0, 1 -> 1 ---


def linear(n):
    return n


def easeInQuad(n):
    return n * n


def easeOutQuad(n):
    return -n * (n - 2)


def easeInOutQuad(n):
    return 2 * n * n if n < 0.5 else -2 * n * n + 4 * n - 1


def easeInCubic(n):
    return n ** 3


def easeOutCubic(n):
    return (n - 1) ** 3 + 1


def easeInOutCubic(n):
    return 4 * n ** 3 if n < 0.5 else 4 * (n - 1) ** 3 + 1


def easeInQuart(n):
    return n ** 4


def easeOutQuart(n):
    return 1 - (n - 1) ** 4


def easeInOutQuart(n):
    return 8 * n ** 4 if n < 0.5 else 1 - 8 * (n - 1) ** 4


def easeInQuint(n):
    return n ** 5


def easeOutQuint(n):
    return (n - 1) ** 5 + 1


def easeInOutQuint(n):
    return 16 * n ** 5 if n < 0.5 else 16 * (n - 1) ** 5 + 1


def easeInSine(n):
    return 1 - math.cos(n * math.pi / 2)


def easeOutSine(n):
    return math.sin(n * math.pi / 2)


def easeInOutSine(n):
    return -(math.cos(math.pi * n) - 1) / 2


def easeInExpo(n):
    return 0.0 if n == 0 else 2 ** (10 * (n - 1))


def easeOutExpo(n):
    return 1.0 if n == 1 else 1 - 2 ** (-10 * n)


def easeInOutExpo(n):
    if n in (0, 1):
        return float(n)
    return 2 ** (20 * n - 10) / 2 if n < 0.5 else 1 - 2 ** (-20 * n + 10) / 2


def easeInCirc(n):
    return 1 - math.sqrt(1 - n * n)


def easeOutCirc(n):
    return math.sqrt(1 - (n - 1) ** 2)


def easeInOutCirc(n):
    if n < 0.5:
        return (1 - math.sqrt(1 - (2 * n) ** 2)) / 2
    return (math.sqrt(1 - (-2 * n + 2) ** 2) + 1) / 2


def easeInElastic(n, amplitude=1, period=0.3):
    return 1 - easeOutElastic(1 - n, amplitude, period)


def easeOutElastic(n, amplitude=1, period=0.3):
    if n in (0, 1):
        return float(n)
    if amplitude < 1:
        amplitude, s = 1, period / 4
    else:
        s = period / (2 * math.pi) * math.asin(1 / amplitude)
    return amplitude * 2 ** (-10 * n) * math.sin((n - s) * (2 * math.pi / period)) + 1


def easeInOutElastic(n, amplitude=1, period=0.5):
    if n < 0.5:
        return easeInElastic(2 * n, amplitude, period) / 2
    return easeOutElastic(2 * n - 1, amplitude, period) / 2 + 0.5


def easeInBack(n, s=1.70158):
    return n * n * ((s + 1) * n - s)


def easeOutBack(n, s=1.70158):
    n -= 1
    return n * n * ((s + 1) * n + s) + 1


def easeInOutBack(n, s=1.70158):
    s *= 1.525
    if n < 0.5:
        n *= 2
        return n * n * ((s + 1) * n - s) / 2
    n = 2 * n - 2
    return (n * n * ((s + 1) * n + s) + 2) / 2


def easeOutBounce(n):
    if n < 1 / 2.75:
        return 7.5625 * n * n
    if n < 2 / 2.75:
        n -= 1.5 / 2.75
        return 7.5625 * n * n + 0.75
    if n < 2.5 / 2.75:
        n -= 2.25 / 2.75
        return 7.5625 * n * n + 0.9375
    n -= 2.625 / 2.75
    return 7.5625 * n * n + 0.984375


def easeInBounce(n):
    return 1 - easeOutBounce(1 - n)


def easeInOutBounce(n):
    if n < 0.5:
        return easeInBounce(2 * n) / 2
    return easeOutBounce(2 * n - 1) / 2 + 0.5


def getPointOnLine(x1, y1, x2, y2, n):
    """The point a fraction n of the way from (x1, y1) to (x2, y2)."""
    return ((x2 - x1) * n + x1, (y2 - y1) * n + y1)
