#!/usr/bin/python3
"""chrome-names.py PAK...: Chromium's user-visible name made Google Chrome's.

OSWorld's tasks run Google Chrome, and some find its window by title
("... - Google Chrome"); Debian ships Chromium, whose titles end in
"Chromium". Chromium takes its titles and the rest of its UI text from the
locale packs (/usr/lib/chromium/locales/*.pak: IDS_BROWSER_WINDOW_TITLE_FORMAT
is "$1 - Chromium" in chromium_strings.grd and "$1 - Google Chrome" in
google_chrome_strings.grd), so rewriting those strings as Chrome's grd has
them gives Chrome's titles, menus and dialogs without a rebuild. The
product name compiled into the binary (version_info, the AT-SPI
application's name) is not in a pack and stays "Chromium".

Each pack is rewritten in place: every whole word "Chromium" becomes
"Google Chrome", and "The Chromium Authors" (the About page's copyright)
"Google LLC", as Chrome's own strings say. The pack format is version 5
(ui/base/resource/data_pack.cc): a header (version u32, encoding u8, 3
pad bytes, resource count u16, alias count u16), resource entries (id u16,
offset u32) with one sentinel entry after them, alias entries (id u16,
entry index u16), then the data. Strings of a UTF-8 pack (encoding 1) are
rewritten; other resources are copied byte for byte. A pack in any other
form fails the build: the strings would not change and titles would
silently say Chromium.
"""

import os
import re
import struct
import sys

# A whole word: "$1Chromium" (a placeholder before it) counts, "ChromiumOS"
# does not.
WORD = re.compile(rb"(?<![A-Za-z])Chromium(?![A-Za-z])")
REPLACEMENTS = [(b"The Chromium Authors", b"Google LLC")]


def rebrand(data):
    """Returns (the rewritten pack, how many strings changed)."""
    if len(data) < 12:
        raise ValueError("too short for a pack header (%d bytes)" % len(data))
    version, encoding = struct.unpack_from("<IB", data, 0)
    if version != 5:
        raise ValueError("pack version %d; only version 5 is known" % version)
    if encoding != 1:
        raise ValueError("pack encoding %d; only 1 (UTF-8) is known" % encoding)
    count, aliases = struct.unpack_from("<HH", data, 8)
    table = 12
    entries = [struct.unpack_from("<HI", data, table + 6 * i) for i in range(count + 1)]
    alias_table = table + 6 * (count + 1)
    data_start = alias_table + 4 * aliases
    for i in range(count):
        if not data_start <= entries[i][1] <= entries[i + 1][1] <= len(data):
            raise ValueError("resource %d's offsets are out of order" % entries[i][0])
    changed = 0
    blobs = []
    for i in range(count):
        blob = data[entries[i][1]:entries[i + 1][1]]
        new = blob
        for old, repl in REPLACEMENTS:
            new = new.replace(old, repl)
        new = WORD.sub(b"Google Chrome", new)
        if new != blob:
            changed += 1
        blobs.append(new)
    out = bytearray(data[:table])
    offset = data_start
    for (rid, _), blob in zip(entries, blobs):
        out += struct.pack("<HI", rid, offset)
        offset += len(blob)
    out += struct.pack("<HI", entries[count][0], offset)
    out += data[alias_table:data_start]
    for blob in blobs:
        out += blob
    return bytes(out), changed


def main(paths):
    if not paths:
        sys.exit("usage: chrome-names.py PAK...")
    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        try:
            out, changed = rebrand(data)
        except ValueError as e:
            sys.exit("chrome-names.py: %s: %s" % (path, e))
        if b"$1 - Google Chrome" not in out and path.endswith("/en-US.pak"):
            sys.exit("chrome-names.py: %s: no window title format '$1 - Chromium' to rewrite" % path)
        with open(path + ".new", "wb") as f:
            f.write(out)
        os.replace(path + ".new", path)
        print("chrome-names.py: %s: %d strings now say Google Chrome" % (path, changed))


if __name__ == "__main__":
    main(sys.argv[1:])
