package vmm

import (
	"errors"
	"fmt"

	"github.com/deskfarm/deskfarm/images"
)

// StoreImages resolves image names through the image cache, mapping its
// errors onto this package's sentinels.
type StoreImages struct{ Store *images.Store }

// Resolve implements ImageResolver.
func (s StoreImages) Resolve(name string) (BaseImage, error) {
	img, err := s.Store.Get(name)
	switch {
	case err == nil:
	case errors.Is(err, images.ErrUnknownImage):
		return BaseImage{}, fmt.Errorf("%w: %w", ErrUnknownImage, err)
	case errors.Is(err, images.ErrNotBuilt):
		return BaseImage{}, fmt.Errorf("%w: %w (run: deskfarm image build %s)", ErrImageNotBuilt, err, name)
	case errors.Is(err, images.ErrBroken):
		return BaseImage{}, fmt.Errorf("%w: %w", ErrBrokenImage, err)
	default:
		return BaseImage{}, err
	}
	return BaseImage{Name: img.Name, Hash: img.Hash, Build: img.Build, Disk: img.Disk, Kernel: img.Kernel, Initrd: img.Initrd, Cmdline: img.Cmdline}, nil
}
