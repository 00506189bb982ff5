# The AT-SPI reader deskfarm ran in the guest before issue 18 (package atspi
# until commit 91f9349), kept as bench/a11y's baseline: a pyatspi walk in
# the guest, as OSWorld's own server does it. OSWorld's /accessibility and
# /terminal, and Cua's get_accessibility_tree.
#
# Run in the guest as the desktop user, in the X session's environment,
# with this file on stdin:
#   python3 - tree       prints the desktop's accessibility tree as
#                        OSWorld's XML (root desktop-frame, one element per
#                        node named by its role, namespaced st:/attr:/cp:/
#                        val:/act: attributes, the node's text as content)
#   python3 - cua        prints the same walk as Cua's tree (JSON): each node
#                        {"role", "title", "children"}, with "position"
#                        {"x", "y"} and "size" {"width", "height"} when it is
#                        on screen, "value" when it has text and "states"
#   python3 - terminal   prints {"output": TEXT or null} (JSON): the text of
#                        the focused terminal of gnome-terminal's active
#                        window, as OSWorld's get_terminal_output
# Exit status 3: pyatspi cannot be imported (an image without AT-SPI).
# Written for deskfarm from the format OSWorld's server produces and the
# shape Cua's computer-server answers (handlers/windows.py, linux.py @
# trycua/cua b296ec9); it needs only python3 and python3-pyatspi (no lxml).
import json
import sys

try:
    import pyatspi
except ImportError as e:
    sys.stderr.write("no AT-SPI in this guest: %s\n" % e)
    sys.exit(3)

NS = [
    ("st", "https://accessibility.ubuntu.example.org/ns/state"),
    ("attr", "https://accessibility.ubuntu.example.org/ns/attributes"),
    ("cp", "https://accessibility.ubuntu.example.org/ns/component"),
    ("doc", "https://accessibility.ubuntu.example.org/ns/document"),
    ("docattr", "https://accessibility.ubuntu.example.org/ns/document/attributes"),
    ("txt", "https://accessibility.ubuntu.example.org/ns/text"),
    ("val", "https://accessibility.ubuntu.example.org/ns/value"),
    ("act", "https://accessibility.ubuntu.example.org/ns/action"),
]
MAX_DEPTH = 50
MAX_WIDTH = 1024
CALC_SCAN = 500  # rows and columns scanned for the first showing cell


class Node:
    # tag, attrs and text are the XML form; role, name, states and box
    # (x, y, width, height, or None off screen) the same facts for Cua's.
    __slots__ = ("tag", "attrs", "text", "children", "role", "name", "states", "box")

    def __init__(self, tag, attrs, text):
        self.tag, self.attrs, self.text, self.children = tag, attrs, text, []
        self.role, self.name, self.states, self.box = "", "", [], None


def state_names(acc):
    out = []
    for st in acc.getState().getStates():
        nick = getattr(st, "value_nick", None) or str(st)
        nick = nick.lower().replace("-", "_")
        if nick.startswith("state_"):
            nick = nick[len("state_"):]
        if nick:
            out.append(nick)
    return out


def describe(acc, flag, full=True):
    # full: every attribute OSWorld's XML carries; Cua's tree needs only
    # the role, name, states, box and text, and skips the other queries.
    attrs = [("name", acc.name or "")]
    states = state_names(acc)
    for s in states:
        attrs.append(("st:" + s, "true"))
    if full:
        try:
            for k, v in (acc.get_attributes() or {}).items():
                if k:
                    attrs.append(("attr:" + k, v))
        except Exception:
            pass
    box = None
    if "visible" in states and "showing" in states:
        try:
            comp = acc.queryComponent()
        except NotImplementedError:
            pass
        else:
            e = comp.getExtents(pyatspi.XY_SCREEN)
            box = (e[0], e[1], e[2], e[3])
            attrs.append(("cp:screencoord", str((box[0], box[1]))))
            attrs.append(("cp:size", str((box[2], box[3]))))
    text = ""
    try:
        t = acc.queryText()
        text = t.getText(0, t.characterCount).replace("\ufffc", "").replace("\ufffd", "")
    except NotImplementedError:
        pass
    raw = acc.getRoleName().strip()
    if not flag:
        if raw == "document spreadsheet":
            flag = "calc"
        elif raw == "application" and acc.name == "Thunderbird":
            flag = "thunderbird"
    if not full:
        return node_of(raw, acc, attrs, text, states, box), flag
    for q, key in (("queryImage", "image"), ("querySelection", "selection")):
        try:
            getattr(acc, q)()
            attrs.append((key, "true"))
        except NotImplementedError:
            pass
    try:
        v = acc.queryValue()
        for name, get in (("value", lambda: v.currentValue), ("min", lambda: v.minimumValue),
                          ("max", lambda: v.maximumValue), ("step", lambda: v.minimumIncrement)):
            try:
                attrs.append(("val:" + name, str(get())))
            except Exception:
                pass
    except NotImplementedError:
        pass
    try:
        a = acc.queryAction()
        for i in range(a.nActions):
            n = a.getName(i).replace(" ", "-")
            attrs.append(("act:" + n + "_desc", a.getDescription(i)))
            attrs.append(("act:" + n + "_kb", a.getKeyBinding(i)))
    except NotImplementedError:
        pass
    return node_of(raw, acc, attrs, text, states, box), flag


def node_of(raw, acc, attrs, text, states, box):
    node = Node((raw or "unknown").replace(" ", "-"), attrs, text)
    node.role, node.name, node.states, node.box = raw or "unknown", acc.name or "", states, box
    return node


def showing(acc):
    return acc.getState().contains(pyatspi.STATE_SHOWING)


def calc_cells(acc):
    # A Calc sheet has a million rows: only the cells on screen, found as
    # OSWorld's server finds them (the first showing column of each row).
    try:
        ncols = acc.queryTable().nColumns or 16384
    except Exception:
        ncols = 16384
    out, base, first, col0 = [], 0, False, None
    n = acc.childCount
    for r in range(1 << 20):
        c = col0 or 0
        while c < ncols and base + c < n:
            cell = acc.getChildAtIndex(base + c)
            if cell is not None and showing(cell):
                if not first:
                    col0, first = c, True
                out.append(cell)
            elif first or c >= CALC_SCAN:
                break
            c += 1
        if (first and c == col0) or (not first and r >= CALC_SCAN) or base + ncols >= n:
            break
        base += ncols
    return out


def build(acc, depth, flag=None, full=True):
    node, flag = describe(acc, flag, full)
    if depth == MAX_DEPTH:
        return node
    try:
        if flag == "calc" and node.tag == "table":
            kids = calc_cells(acc)
        else:
            kids = []
            for i in range(min(acc.childCount, MAX_WIDTH)):
                ch = acc.getChildAtIndex(i)
                if ch is not None:
                    kids.append(ch)
        for ch in kids:
            try:
                node.children.append(build(ch, depth + 1, flag, full))
            except Exception:
                pass
    except Exception:
        pass
    return node


def clean(s):
    return "".join(c for c in s if c in "\t\n\r" or ord(c) >= 0x20 and not 0xD800 <= ord(c) <= 0xDFFF and c not in "\ufffe\uffff")


def esc_text(s):
    return clean(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def esc_attr(s):
    return (esc_text(s).replace('"', "&quot;").replace("\t", "&#9;")
            .replace("\n", "&#10;").replace("\r", "&#13;"))


def write(node, out, root_ns=False):
    out.append("<" + node.tag)
    if root_ns:
        for p, uri in NS:
            out.append(' xmlns:%s="%s"' % (p, uri))
    for k, v in node.attrs:
        out.append(' %s="%s"' % (k, esc_attr(str(v))))
    if not node.text and not node.children:
        out.append("/>")
        return
    out.append(">")
    out.append(esc_text(node.text))
    for ch in node.children:
        write(ch, out)
    out.append("</%s>" % node.tag)


def walk(full):
    desktop = pyatspi.Registry.getDesktop(0)
    root = Node("desktop-frame", [], "")
    root.role = "desktop frame"
    for i in range(desktop.childCount):
        app = desktop.getChildAtIndex(i)
        if app is not None:
            try:
                root.children.append(build(app, 1, None, full))
            except Exception:
                pass
    return root


def tree():
    out = []
    write(walk(True), out, root_ns=True)
    sys.stdout.write("".join(out))


def cua_node(node):
    d = {"role": node.role, "title": node.name}
    if node.box is not None:
        d["position"] = {"x": node.box[0], "y": node.box[1]}
        d["size"] = {"width": node.box[2], "height": node.box[3]}
    if node.text:
        d["value"] = clean(node.text)
    if node.states:
        d["states"] = node.states
    d["children"] = [cua_node(ch) for ch in node.children]
    return d


def cua():
    json.dump(cua_node(walk(False)), sys.stdout, ensure_ascii=False)


def find_focused_terminals(acc, depth=0):
    found = []
    try:
        if acc.getRoleName() == "terminal" and acc.getState().contains(pyatspi.STATE_FOCUSED):
            found.append(acc)
        if depth < MAX_DEPTH:
            for i in range(min(acc.childCount, MAX_WIDTH)):
                ch = acc.getChildAtIndex(i)
                if ch is not None:
                    found.extend(find_focused_terminals(ch, depth + 1))
    except Exception:
        pass
    return found


def terminal():
    desktop = pyatspi.Registry.getDesktop(0)
    output = None
    for i in range(desktop.childCount):
        app = desktop.getChildAtIndex(i)
        if app is None or app.getRoleName() != "application" or app.name != "gnome-terminal-server":
            continue
        terms = []
        for j in range(app.childCount):
            fr = app.getChildAtIndex(j)
            if fr is not None and fr.getRoleName() == "frame" and fr.getState().contains(pyatspi.STATE_ACTIVE):
                terms.extend(find_focused_terminals(fr))
        if len(terms) == 1:
            t = terms[0].queryText()
            output = t.getText(0, t.characterCount).replace("\ufffc", "").replace("\ufffd", "").rstrip()
        break
    json.dump({"output": output}, sys.stdout)


if __name__ == "__main__":
    {"tree": tree, "cua": cua, "terminal": terminal}[sys.argv[1]]()
