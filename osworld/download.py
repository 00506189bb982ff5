# download.py URL PATH: /setup/download_file's download, run in the guest
# as the desktop user (python3 - URL PATH, this file on stdin). It does what
# OSWorld's server does with requests, with the standard library (the
# osworld image has no python3-requests): three attempts, no pause between
# them, a 300 s socket timeout, the file removed after a failed attempt, a
# short file (fewer bytes than Content-Length) a failure.
#
# Exit 0: the file is there; stdout is its size.
# Exit 3: every attempt failed; stdout is the last error, in requests'
#         words where it has them ("404 Client Error: Not Found for url: U").
# Exit 4: the parent directory could not be made; stdout says why.
import os
import sys
import urllib.error
import urllib.request

ATTEMPTS = 3
TIMEOUT = 300


def describe(e):
    if isinstance(e, urllib.error.HTTPError):
        kind = "Client" if e.code < 500 else "Server"
        return "%d %s Error: %s for url: %s" % (e.code, kind, e.reason, e.url)
    if isinstance(e, urllib.error.URLError):
        return "%s" % (e.reason,)
    return str(e) or type(e).__name__


def fetch(url, path):
    with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
        total = int(resp.headers.get("Content-Length") or 0)
        with open(path, "wb") as f:
            while True:
                chunk = resp.read(1 << 16)
                if not chunk:
                    break
                f.write(chunk)
    size = os.path.getsize(path)
    if total > 0 and size != total:
        raise Exception("Download incomplete. Expected %d bytes, got %d bytes" % (total, size))
    return size


def main():
    url, path = sys.argv[1], sys.argv[2]
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    except OSError as e:
        print(e)
        return 4
    err = None
    for _ in range(ATTEMPTS):
        try:
            print(fetch(url, path))
            return 0
        except Exception as e:
            err = e
            try:
                os.unlink(path)
            except OSError:
                pass
    print(describe(err))
    return 3


sys.exit(main())
