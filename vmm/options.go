package vmm

// What a VM is made with: CreateOptions, normalised once (Normalize) into
// the value every later step reads, and the checks that need no host.
// The host's limits (its CPUs, the memory VMs may have) are checked by
// Manager.Create (admission.go).
//
// Field names in errors are the API's spelling of the option
// ("memory_mib", "forwards[1].host_port"): web sends them as they are.

import (
	"maps"
	"slices"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// CreateOptions says what VM to make. Zero values take the documented defaults.
type CreateOptions struct {
	// Image is the recipe name, e.g. "desktop" or "tiny". Required.
	Image string
	// MemoryMiB is guest RAM; default DefaultMemoryMiB, at least MinMemoryMiB.
	MemoryMiB int
	// VCPUs is the number of virtual CPUs; default DefaultVCPUs, at most the host's CPUs.
	VCPUs int
	// Boot forces a full boot even when a saved ready state of this image
	// and size exists (for baselines; normally saved state is faster).
	Boot bool
	// Width and Height set the guest screen; default 1280x800.
	Width  int
	Height int
	// Labels are kept in the domain's metadata and survive a deskfarm
	// restart, e.g. the pool a VM belongs to. Keys and values are short
	// printable strings (see ValidateLabels).
	Labels map[string]string
	// Network is NetworkNone (the default: the guest has no network
	// interface at all) or NetworkUser (QEMU user-mode networking: the
	// guest reaches out through the host's stack, nothing reaches in except
	// Forwards).
	Network string
	// Forwards are host ports on 127.0.0.1 forwarded to guest TCP ports,
	// at most MaxForwards. Under NetworkNone they get a NIC on a restricted
	// stack: the forwards reach in, the guest reaches nothing out.
	Forwards []Forward
}

// Defaults and limits for CreateOptions.
const (
	DefaultMemoryMiB = 1024
	MinMemoryMiB     = 128
	DefaultVCPUs     = 2
	DefaultWidth     = 1280
	DefaultHeight    = 800
)

// Screen limits (CreateOptions.Width, Height).
const (
	MinWidth, MaxWidth   = 640, 3840
	MinHeight, MaxHeight = 480, 2160
)

// Normalize returns opts with the defaults filled in, or an error naming
// the first option that no host accepts. opts itself is not changed (its
// labels and forwards are copied), and Normalize of a normalised value
// returns it unchanged.
func (opts CreateOptions) Normalize() (CreateOptions, error) {
	o := opts
	o.Labels = maps.Clone(opts.Labels)
	o.Forwards = slices.Clone(opts.Forwards)
	if o.Image == "" {
		return o, fielderr.Newf("image", ErrInvalid, "required (e.g. \"desktop\" or \"tiny\")")
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = DefaultMemoryMiB
	}
	if o.VCPUs == 0 {
		o.VCPUs = DefaultVCPUs
	}
	if o.Width == 0 && o.Height == 0 {
		o.Width, o.Height = DefaultWidth, DefaultHeight
	}
	if o.Network == "" {
		o.Network = NetworkNone
	}
	switch {
	case o.MemoryMiB < MinMemoryMiB:
		return o, fielderr.Newf("memory_mib", ErrInvalid, "%d is below the minimum of %d MiB (0 for %d)", o.MemoryMiB, MinMemoryMiB, DefaultMemoryMiB)
	case o.VCPUs < 1:
		return o, fielderr.Newf("vcpus", ErrInvalid, "%d: want at least 1 (0 for %d)", o.VCPUs, DefaultVCPUs)
	case o.Width != 0 && (o.Width < MinWidth || o.Width > MaxWidth):
		return o, fielderr.Newf("width", ErrInvalid, "%d is outside %d..%d", o.Width, MinWidth, MaxWidth)
	case o.Height != 0 && (o.Height < MinHeight || o.Height > MaxHeight):
		return o, fielderr.Newf("height", ErrInvalid, "%d is outside %d..%d", o.Height, MinHeight, MaxHeight)
	case o.Width == 0:
		return o, fielderr.Newf("width", ErrInvalid, "required with height (or neither, for %dx%d)", DefaultWidth, DefaultHeight)
	case o.Height == 0:
		return o, fielderr.Newf("height", ErrInvalid, "required with width (or neither, for %dx%d)", DefaultWidth, DefaultHeight)
	case o.Width%8 != 0:
		// bochs-drm shows widths that are not a multiple of 8 skewed.
		return o, fielderr.Newf("width", ErrInvalid, "%d is not a multiple of 8 (e.g. 1368 rather than 1366)", o.Width)
	}
	if err := checkNetwork(o.Network, o.Forwards); err != nil {
		return o, err
	}
	if err := ValidateLabels(o.Labels); err != nil {
		return o, err
	}
	return o, nil
}

// Label limits (ValidateLabels).
const (
	MaxLabels        = 16
	MaxLabelKeyLen   = 63
	MaxLabelValueLen = 253
)

// ValidateLabels checks label keys ([a-z0-9._-], 1-63 bytes, starting with a
// letter or digit) and values (printable ASCII without '<', '>' or '&',
// at most 253 bytes), and that there are at most MaxLabels.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fielderr.Newf("labels", ErrInvalid, "%d labels; at most %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if !validLabelKey(k) {
			return fielderr.Newf("labels", ErrInvalid, "key %q: want 1-%d of a-z, 0-9, '.', '_', '-', starting with a letter or digit", k, MaxLabelKeyLen)
		}
		if len(v) > MaxLabelValueLen {
			return fielderr.Newf("labels."+k, ErrInvalid, "value is %d bytes; at most %d", len(v), MaxLabelValueLen)
		}
		for _, r := range v {
			if r < 0x20 || r > 0x7e || r == '<' || r == '>' || r == '&' {
				return fielderr.Newf("labels."+k, ErrInvalid, "value %q: want printable ASCII without <, > or &", v)
			}
		}
	}
	return nil
}

func validLabelKey(k string) bool {
	if k == "" || len(k) > MaxLabelKeyLen {
		return false
	}
	for i, r := range k {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '.' && r != '_' && r != '-') {
			return false
		}
	}
	return true
}
