package images

import "errors"

// Sentinel errors. Callers test them with errors.Is; returned errors wrap
// them with the operation and the image name.
var (
	// ErrUnknownImage means the name is not a known recipe; the message
	// lists the known ones.
	ErrUnknownImage = errors.New("unknown image")
	// ErrNotBuilt means the recipe is known but the cache holds no build of
	// its current hash.
	ErrNotBuilt = errors.New("image not built")
	// ErrBroken means a build of the current hash is in the cache but is
	// unusable: a missing or empty file, a size that disagrees with the
	// manifest, or a bad manifest. The message says which.
	ErrBroken = errors.New("broken image")
	// ErrBuildFailed means a recipe's build.sh failed; the message carries
	// the last lines of its log and the path of the whole log.
	ErrBuildFailed = errors.New("image build failed")
	// ErrNoSource means a recipe needs the deskfarm source tree (the tiny
	// image's init is built from it) and it could not be found.
	ErrNoSource = errors.New("deskfarm source tree not found")
)
