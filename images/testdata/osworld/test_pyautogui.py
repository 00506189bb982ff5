"""Tests of deskfarm's pyautogui (images/recipes/osworld/pyautogui.py) on a
real X server: Xvfb, started here on a free display. Each test checks what
an application would see: a window of this file's own (run as a separate
process, "--receiver") reports the X events it gets, and the pointer and
keyboard state are read back from the server.

Run: python3 -m unittest images/testdata/osworld/test_pyautogui.py
Needs Debian's xvfb, python3-xlib and python3-pil. The Go test
images.TestOSWorldPyautogui runs this file.
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the recipe directory

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPE = os.path.join(HERE, "..", "..", "recipes", "osworld")
WIDTH, HEIGHT = 1920, 1080
BACKGROUND = (0x33, 0x66, 0x99)  # the receiver window's colour


# --- the receiver: a full-screen window that prints its events as JSON ------


def keysym_text(ks):
    """The text of a keysym as XLookupString gives it, for what the tests type."""
    if 0x20 <= ks <= 0x7E or 0xA0 <= ks <= 0xFF:
        return chr(ks)
    if ks >= 0x01000000:
        return chr(ks - 0x01000000)
    return {0xFF0D: "\n", 0xFF09: "\t"}.get(ks, "")


def receiver():
    from Xlib import X, display

    d = display.Display()
    s = d.screen()
    pixel = (BACKGROUND[0] << 16) | (BACKGROUND[1] << 8) | BACKGROUND[2]
    w = s.root.create_window(
        0, 0, s.width_in_pixels, s.height_in_pixels, 0, s.root_depth,
        background_pixel=pixel, override_redirect=True,
        event_mask=X.ButtonPressMask | X.ButtonReleaseMask | X.KeyPressMask | X.KeyReleaseMask | X.ExposureMask,
    )
    w.map()
    d.sync()
    w.set_input_focus(X.RevertToParent, X.CurrentTime)
    d.sync()
    out = sys.stdout

    def emit(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    emit(type="ready")
    while True:
        e = d.next_event()
        if e.type == X.MappingNotify:
            # As every client does: re-read the keymap that changed.
            d.refresh_keyboard_mapping(e)
        elif e.type in (X.ButtonPress, X.ButtonRelease):
            emit(type="press" if e.type == X.ButtonPress else "release", button=e.detail,
                 x=e.root_x, y=e.root_y, state=e.state)
        elif e.type in (X.KeyPress, X.KeyRelease):
            shift = bool(e.state & X.ShiftMask)
            ks = d.keycode_to_keysym(e.detail, 1 if shift else 0)
            if ks == 0 and shift:
                ks = d.keycode_to_keysym(e.detail, 0)
            emit(type="keydown" if e.type == X.KeyPress else "keyup", keycode=e.detail,
                 keysym=ks, text=keysym_text(ks), state=e.state)


# --- the tests ------------------------------------------------------------


def start_xvfb():
    """Starts Xvfb on a display it picks itself (-displayfd) and returns
    (process, ":N")."""
    r, w = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(w), "-screen", "0", "%dx%dx24" % (WIDTH, HEIGHT), "-nolisten", "tcp"],
        pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.close(w)
    num = b""
    with os.fdopen(r, "rb") as f:
        while not num.endswith(b"\n"):
            c = f.read(1)
            if not c:
                proc.kill()
                raise RuntimeError("Xvfb exited before naming its display")
            num += c
    return proc, ":" + num.decode().strip()


class PyautoguiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.xvfb, display = start_xvfb()
        os.environ["DISPLAY"] = display
        cls.recv = subprocess.Popen([sys.executable, __file__, "--receiver"], stdout=subprocess.PIPE, text=True)
        cls.events = queue.Queue()

        def pump():
            for line in cls.recv.stdout:
                cls.events.put(json.loads(line))

        threading.Thread(target=pump, daemon=True).start()
        first = cls.events.get(timeout=10)
        assert first["type"] == "ready", first
        sys.path.insert(0, os.path.abspath(RECIPE))
        import pyautogui

        cls.pg = pyautogui
        from Xlib import display as xdisplay

        cls.x = xdisplay.Display(display)

    @classmethod
    def tearDownClass(cls):
        cls.recv.kill()
        cls.recv.wait()
        cls.xvfb.terminate()
        cls.xvfb.wait()

    def setUp(self):
        self.pg.FAILSAFE = False
        self.pg.PAUSE = 0.1
        self.drain()

    def drain(self):
        time.sleep(0.05)
        while True:
            try:
                self.events.get_nowait()
            except queue.Empty:
                return

    def collect(self, want, kinds, timeout=5):
        """Events of the given kinds, until want of them arrived or timeout."""
        got, end = [], time.time() + timeout
        while len(got) < want and time.time() < end:
            try:
                e = self.events.get(timeout=0.1)
            except queue.Empty:
                continue
            if e["type"] in kinds:
                got.append(e)
        # Nothing more of these kinds may follow.
        time.sleep(0.2)
        while True:
            try:
                e = self.events.get_nowait()
            except queue.Empty:
                break
            if e["type"] in kinds:
                got.append(e)
        return got

    def typed(self, want_len, timeout=10):
        text, end = "", time.time() + timeout
        while len(text) < want_len and time.time() < end:
            try:
                e = self.events.get(timeout=0.1)
            except queue.Empty:
                continue
            if e["type"] == "keydown":
                text += e["text"]
        time.sleep(0.2)
        while True:
            try:
                e = self.events.get_nowait()
            except queue.Empty:
                break
            if e["type"] == "keydown":
                text += e["text"]
        return text

    def pointer(self):
        p = self.x.screen().root.query_pointer()
        return (p.root_x, p.root_y)

    def keys_down(self):
        """Keycodes the server has down."""
        bits = self.x.query_keymap()
        return [i * 8 + b for i, byte in enumerate(bits) for b in range(8) if byte & (1 << b)]

    def keymap(self):
        info = self.x.display.info
        return self.x.get_keyboard_mapping(info.min_keycode, info.max_keycode - info.min_keycode + 1)

    # --- screen ---

    def test_size_and_screenshot(self):
        self.assertEqual(tuple(self.pg.size()), (WIDTH, HEIGHT))
        img = self.pg.screenshot()
        self.assertEqual(img.size, (WIDTH, HEIGHT))
        self.assertEqual(img.mode, "RGB")
        self.assertEqual(img.getpixel((WIDTH // 2, HEIGHT // 2)), BACKGROUND)
        part = self.pg.screenshot(region=(10, 20, 30, 40))
        self.assertEqual(part.size, (30, 40))
        self.assertEqual(self.pg.pixel(5, 5), BACKGROUND)
        self.assertTrue(self.pg.onScreen(WIDTH - 1, HEIGHT - 1))
        self.assertFalse(self.pg.onScreen(WIDTH, 0))
        self.assertFalse(self.pg.onScreen((-1, 5)))

    def test_screenshot_to_file(self):
        import tempfile
        from PIL import Image

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.png")
            self.pg.screenshot(path)
            with Image.open(path) as img:
                self.assertEqual(img.size, (WIDTH, HEIGHT))

    # --- pointer ---

    def test_moveTo_lands_where_it_says(self):
        self.pg.moveTo(100, 200)
        self.assertEqual(self.pointer(), (100, 200))
        self.assertEqual(tuple(self.pg.position()), (100, 200))
        self.pg.moveTo(1500, 900, duration=0.3, tween=self.pg.easeInOutQuad)
        self.assertEqual(self.pointer(), (1500, 900))
        self.pg.moveTo((640, 480), duration=0.2, tween=self.pg.easeInBounce)
        self.assertEqual(self.pointer(), (640, 480))
        self.pg.moveTo(700.9, None)
        self.assertEqual(self.pointer(), (700, 480))
        self.pg.moveRel(-50, 20)
        self.assertEqual(self.pointer(), (650, 500))
        self.pg.move(10, None, duration=0.15, tween=self.pg.easeOutElastic)
        self.assertEqual(self.pointer(), (660, 500))

    def test_tween_moves_stay_on_screen(self):
        # easeInBack and elastic overshoot; the pointer is clamped, the end is exact.
        self.pg.moveTo(3, 3)
        self.pg.moveTo(WIDTH - 3, HEIGHT - 3, duration=0.2, tween=self.pg.easeOutBack)
        self.assertEqual(self.pointer(), (WIDTH - 3, HEIGHT - 3))

    def test_click_events_arrive_at_the_point(self):
        self.pg.click(300, 400)
        ev = self.collect(2, {"press", "release"})
        self.assertEqual([(e["type"], e["button"], e["x"], e["y"]) for e in ev],
                         [("press", 1, 300, 400), ("release", 1, 300, 400)])
        self.pg.rightClick(310, 410)
        ev = self.collect(2, {"press", "release"})
        self.assertEqual([(e["button"], e["x"], e["y"]) for e in ev], [(3, 310, 410)] * 2)
        self.pg.middleClick()
        ev = self.collect(2, {"press", "release"})
        self.assertEqual([(e["button"], e["x"], e["y"]) for e in ev], [(2, 310, 410)] * 2)

    def test_multi_clicks(self):
        self.pg.doubleClick(50, 60)
        self.assertEqual([e["button"] for e in self.collect(4, {"press"}, timeout=2)], [1, 1])
        self.pg.tripleClick(50, 60)
        self.assertEqual([e["button"] for e in self.collect(3, {"press"}, timeout=2)], [1, 1, 1])
        self.pg.click(x=70, y=80, clicks=2, interval=0.1, button="right")
        ev = self.collect(2, {"press"}, timeout=2)
        self.assertEqual([(e["button"], e["x"], e["y"]) for e in ev], [(3, 70, 80)] * 2)

    def test_mouseDown_mouseUp_and_drag(self):
        self.pg.moveTo(100, 100)
        self.pg.dragTo(600, 500, duration=0.2, button="left")
        ev = self.collect(2, {"press", "release"})
        self.assertEqual([(e["type"], e["button"], e["x"], e["y"]) for e in ev],
                         [("press", 1, 100, 100), ("release", 1, 600, 500)])
        self.pg.dragRel(-100, 50, duration=0.1)
        ev = self.collect(2, {"press", "release"})
        self.assertEqual([(e["x"], e["y"]) for e in ev], [(600, 500), (500, 550)])
        self.pg.mouseDown(200, 210, button="right")
        self.pg.mouseUp(220, 230, button="right")
        ev = self.collect(2, {"press", "release"})
        self.assertEqual([(e["type"], e["button"], e["x"], e["y"]) for e in ev],
                         [("press", 3, 200, 210), ("release", 3, 220, 230)])
        # dragTo with mouseDownUp=False only moves.
        self.pg.dragTo(10, 20, mouseDownUp=False)
        self.assertEqual(self.collect(1, {"press", "release"}, timeout=0.5), [])
        self.assertEqual(self.pointer(), (10, 20))
        root = self.x.screen().root.query_pointer()
        self.assertEqual(root.mask & 0x1F00, 0, "a mouse button is still down")

    def test_scroll_buttons(self):
        self.pg.scroll(3, x=400, y=300)
        self.assertEqual([(e["button"], e["x"], e["y"]) for e in self.collect(3, {"press"})], [(4, 400, 300)] * 3)
        self.pg.scroll(-2)
        self.assertEqual([e["button"] for e in self.collect(2, {"press"})], [5, 5])
        self.pg.vscroll(1)
        self.assertEqual([e["button"] for e in self.collect(1, {"press"})], [4])
        self.pg.hscroll(2)
        self.assertEqual([e["button"] for e in self.collect(2, {"press"})], [7, 7])
        self.pg.hscroll(-1)
        self.assertEqual([e["button"] for e in self.collect(1, {"press"})], [6])

    def test_failsafe(self):
        self.pg.moveTo(0, 0)
        self.pg.FAILSAFE = True
        with self.assertRaises(self.pg.FailSafeException):
            self.pg.click(10, 10)
        self.assertEqual(self.collect(1, {"press"}, timeout=0.5), [])
        self.pg.FAILSAFE = False
        self.pg.click(10, 10)
        self.assertEqual(len(self.collect(1, {"press"})), 1)

    # --- keyboard ---

    def test_typewrite_ascii(self):
        text = "Hello, World! 0123456789 ~`!@#$%^&*()_+-=[]{}\\|;:'\",.<>/?"
        self.pg.typewrite(text)
        self.assertEqual(self.typed(len(text)), text)
        self.pg.write("two\tlines\n", interval=0.02)
        self.assertEqual(self.typed(10), "two\tlines\n")
        self.assertEqual(self.keys_down(), [])

    def test_write_unicode_exactly_and_restores_the_keymap(self):
        before = self.keymap()
        text = "Grüße, café — naïve ✓ 日本語"
        self.pg.write(text)
        self.assertEqual(self.typed(len(text)), text)
        self.assertEqual(self.keymap(), before, "the keymap was not restored")
        self.assertEqual(self.keys_down(), [])
        # More distinct characters than a keymap has spare keycodes.
        many = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 150))
        self.pg.PAUSE = 0
        self.pg.write(many)
        self.assertEqual(self.typed(len(many), timeout=30), many)
        self.assertEqual(self.keymap(), before)

    def test_typewrite_list_and_press(self):
        self.pg.typewrite(["a", "b", "enter", "space", "C"])
        self.assertEqual(self.typed(5), "ab\n C")
        self.pg.press("tab", presses=3, interval=0.05)
        self.assertEqual(self.typed(3), "\t\t\t")
        self.pg.press(["x", "y"])
        self.assertEqual(self.typed(2), "xy")
        self.pg.press("Enter")
        self.assertEqual(self.typed(1), "\n")
        self.pg.press("é")
        self.assertEqual(self.typed(1), "é")
        self.assertEqual(self.keys_down(), [])

    def test_hotkey_and_keyDown_keyUp_leave_no_key_held(self):
        from Xlib import X

        self.pg.hotkey("ctrl", "shift", "a")
        downs = self.collect(3, {"keydown"})
        self.assertEqual(len(downs), 3)
        a = downs[-1]
        self.assertEqual(a["keysym"] & ~0x20, ord("A"))  # the a key, either case
        self.assertTrue(a["state"] & X.ControlMask and a["state"] & X.ShiftMask, a)
        self.assertEqual(self.keys_down(), [])
        self.pg.keyDown("shift")
        self.assertNotEqual(self.keys_down(), [])
        self.pg.typewrite("b")
        self.assertEqual(self.typed(1), "B")
        self.pg.keyUp("shift")
        self.assertEqual(self.keys_down(), [])
        with self.pg.hold("ctrl"):
            self.assertNotEqual(self.keys_down(), [])
        self.assertEqual(self.keys_down(), [])
        self.pg.hotkey("alt", "f4", interval=0.05)
        self.assertEqual(self.keys_down(), [])
        # Unknown names do nothing, as in PyAutoGUI (agents send "ctrl+c").
        self.pg.press("ctrl+c")
        self.pg.hotkey("ctrl", "nosuchkey")
        self.assertEqual(self.keys_down(), [])

    def test_every_key_name_resolves(self):
        # Every KEYBOARD_KEYS name but "fn" (no X keysym) maps to a keysym.
        unresolved = []
        for k in self.pg.KEYBOARD_KEYS:
            try:
                self.pg._keysym(k)
            except self.pg.PyAutoGUIException:
                unresolved.append(k)
        self.assertEqual(unresolved, ["fn"])


class ImportTest(unittest.TestCase):
    def test_import_needs_no_display(self):
        env = dict(os.environ)
        env.pop("DISPLAY", None)
        env["PYTHONPATH"] = os.path.abspath(RECIPE)
        r = subprocess.run([sys.executable, "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; print('ok')"],
                           env=env, capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "ok"), r.stderr)

    def test_tweens(self):
        sys.path.insert(0, os.path.abspath(RECIPE))
        import pyautogui

        names = ["linear", "easeInQuad", "easeOutQuad", "easeInOutQuad", "easeInCubic", "easeOutCubic",
                 "easeInOutCubic", "easeInQuart", "easeOutQuart", "easeInOutQuart", "easeInQuint",
                 "easeOutQuint", "easeInOutQuint", "easeInSine", "easeOutSine", "easeInOutSine",
                 "easeInExpo", "easeOutExpo", "easeInOutExpo", "easeInCirc", "easeOutCirc", "easeInOutCirc",
                 "easeInElastic", "easeOutElastic", "easeInOutElastic", "easeInBack", "easeOutBack",
                 "easeInOutBack", "easeInBounce", "easeOutBounce", "easeInOutBounce"]
        for n in names:
            f = getattr(pyautogui, n)
            self.assertAlmostEqual(f(0.0), 0.0, places=6, msg=n)
            self.assertAlmostEqual(f(1.0), 1.0, places=6, msg=n)
        self.assertAlmostEqual(pyautogui.easeInQuad(0.5), 0.25)


if __name__ == "__main__":
    if sys.argv[1:] == ["--receiver"]:
        receiver()
    else:
        unittest.main()
