// Package images builds and caches deskfarm's guest images.
//
// A recipe is a directory under recipes/ (embedded in the binary) holding a
// build.sh and the files it needs. Running
//
//	bash build.sh OUTDIR
//
// with the current directory a scratch work dir and DESKFARM_RECIPE_DIR,
// DESKFARM_MIRROR (plus recipe-specific variables) in the environment writes
// disk.qcow2, vmlinuz, initrd.img and cmdline into OUTDIR, printing
// "::step N/M description" before each major step.
//
// A recipe may build on another: its file "base" names the base recipe,
// whose files are extracted beside it and given to build.sh as
// DESKFARM_BASE_DIR. The osworld recipe is the desktop recipe run with the
// osworld directory as its variant, holding only what differs.
//
// Builds are cached in CacheDir/images/<name>-<hash12>/, where the hash is a
// SHA-256 over the recipe's files, its base's files (and, for the tiny
// recipe, over its init binary built from this module's source). A build runs in a temporary
// directory beside the cache entry and is renamed into place only when it
// succeeded; the entry's files are read-only because QEMU uses disk.qcow2
// as the backing file of every VM's overlay.
package images
