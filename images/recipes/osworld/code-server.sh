#!/usr/bin/env bash
# code-server.sh OUTDIR puts VS Code into OUTDIR for the osworld image, as
# code-server (github.com/coder/code-server: VS Code's own workbench and
# server, served to a browser), from the npm registry: VS Code is not a
# Debian package, and Microsoft's builds come from its own servers, which
# the guest and the build host cannot reach.
#
# Why this release: code-server 4.22.0 (VS Code 1.87.0) is the last whose
# engines field takes Node 18, Debian 12's nodejs, which runs it in the
# guest; later ones require Node 20 or 22.
#
# Run on the build host (which has node, npm and a C++ compiler: the
# machine's Node.js or Debian's, with its headers). npm's install scripts
# are not run: code-server's postinstall fetches nothing itself, but
# @vscode/ripgrep's downloads ripgrep from GitHub (Debian's ripgrep, in the
# image, stands in) and the native modules' would fetch Node's headers from
# nodejs.org. The native modules are compiled here instead, against the
# build host's Node headers: all five (node-pty, @vscode/spdlog,
# native-watchdog, argon2, @parcel/watcher's prebuilt one) use Node-API,
# whose binaries load in any later Node, so Node 20's build runs on the
# guest's Node 18 (N-API 8 in both). kerberos (Kerberos proxy
# authentication, loaded on demand inside a try) is left unbuilt.
set -euo pipefail
version=4.22.0
# npm's dist.integrity of code-server@4.22.0: the tarball is checked
# against it, so a changed tarball fails the build.
integrity=sha512-LJtIVpQMNYXsKnWC0S11fo9uL/pTHA8v/OjUNwPiuKofwH1uySERz9GRVSMPNlteBKGXkECvQJdw42ff6Zh/AA==
out=${1:?usage: code-server.sh OUTDIR}

for tool in node npm c++ make python3; do
	command -v "$tool" >/dev/null || {
		echo "code-server.sh: $tool is missing on the build host (scripts/setup-host.sh installs it)" >&2
		exit 1
	}
done
nodedir=$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")
if [ ! -e "$nodedir/include/node/node_api.h" ]; then
	echo "code-server.sh: no Node headers at $nodedir/include/node (Debian: libnode-dev)" >&2
	exit 1
fi
gyp=$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js
if [ ! -e "$gyp" ]; then
	gyp=$(command -v node-gyp || true)
fi
if [ -z "$gyp" ]; then
	echo "code-server.sh: no node-gyp (npm's own, or Debian's node-gyp)" >&2
	exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/deskfarm-code-server.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
npm_q=(--no-audit --no-fund --no-update-notifier --loglevel=error)
echo "code-server.sh: npm pack code-server@$version"
npm pack "${npm_q[@]}" "code-server@$version" >/dev/null
tgz=code-server-$version.tgz
got=sha512-$(node -e 'process.stdout.write(require("crypto").createHash("sha512").update(require("fs").readFileSync(process.argv[1])).digest("base64"))' "$tgz")
if [ "$got" != "$integrity" ]; then
	echo "code-server.sh: $tgz has integrity $got, want $integrity" >&2
	exit 1
fi
tar -xzf "$tgz"
rm -rf "$out"
mv package "$out"
cd "$out"
echo "code-server.sh: npm install (code-server, VS Code, its extensions), no scripts"
npm install "${npm_q[@]}" --omit=dev --ignore-scripts
(cd lib/vscode && npm install "${npm_q[@]}" --omit=dev --ignore-scripts --legacy-peer-deps)
(cd lib/vscode/extensions && npm install "${npm_q[@]}" --omit=dev --ignore-scripts)

echo "code-server.sh: native modules against $nodedir/include/node"
build() { # build DIR [node-gyp|node-pre-gyp]
	(cd "$1" && node "$2" rebuild --nodedir="$nodedir" -j "$(nproc)" >"$tmp/build.log" 2>&1) || {
		tail -n 40 "$tmp/build.log" >&2
		echo "code-server.sh: building $1 failed" >&2
		exit 1
	}
	# Keep the module, not the objects.
	find "$1" -path '*/build*/Release/obj.target' -prune -exec rm -rf {} +
	find "$1" -name '*.node' -printf 'code-server.sh: built %p\n'
}
m=lib/vscode/node_modules
build $m/node-pty "$gyp"
build $m/@vscode/spdlog "$gyp"
build $m/native-watchdog "$gyp"
build node_modules/argon2 "$PWD/node_modules/@mapbox/node-pre-gyp/bin/node-pre-gyp"
test -e $m/@parcel/watcher/prebuilds/linux-x64/node.napi.glibc.node

# What code-server's postinstall.sh does besides npm install.
ln -sfn node_modules lib/vscode/node_modules.asar
ln -sfn code-linux.sh lib/vscode/bin/remote-cli/code-server
ln -sfn browser-linux.sh lib/vscode/bin/helpers/browser.sh
# ripgrep (search in files) from Debian's package.
mkdir -p $m/@vscode/ripgrep/bin
ln -sfn /usr/bin/rg $m/@vscode/ripgrep/bin/rg
# The window says "Visual Studio Code", as OSWorld's tasks look for it
# (activate_window "Visual Studio Code"): the workbench's title ends in
# the product's long name, which code-server's build compiled into its
# bundles (product.json is not read), one copy per bundle.
n=0
for f in $(grep -rl --include='*.js' 'nameShort:"code-server",nameLong:"code-server"' lib/vscode/out); do
	sed -i 's/nameShort:"code-server",nameLong:"code-server"/nameShort:"Visual Studio Code",nameLong:"Visual Studio Code"/' "$f"
	n=$((n + 1))
done
if ! grep -q 'nameLong:"Visual Studio Code"' lib/vscode/out/vs/workbench/workbench.web.main.js; then
	echo "code-server.sh: the workbench's product name was not found to rename (patched $n bundles)" >&2
	exit 1
fi
echo "code-server.sh: product name set in $n bundles"
# code-server's parent process gives the server process it spawns 10 s to
# answer its handshake, then logs "error timed out" and exits, leaving no
# server. Under TCG on a busy 2-core host the child's module load took
# longer: CI at 0ff0b59 logged exactly that 2 min into
# TestE2EOSWorldVSCode, and no window came in 5 min. Two minutes here;
# `code` waits for the port as long (its loop below the server's start).
sed -i 's/^const timeoutInterval = 10000;/const timeoutInterval = 120000;/' out/node/wrapper.js
if ! grep -q '^const timeoutInterval = 120000;' out/node/wrapper.js; then
	echo "code-server.sh: the wrapper's handshake timeout was not found to raise (out/node/wrapper.js)" >&2
	exit 1
fi
du -sh "$out" | sed 's/^/code-server.sh: /'
