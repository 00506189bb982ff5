package pool

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
	"go.yaml.in/yaml/v3"
)

// Config declares the pools of a farm. It is read from YAML:
//
//	pools:
//	  - name: desktop
//	    image: desktop
//	    memory_mib: 1024
//	    vcpus: 2
//	    width: 1280
//	    height: 800
//	    min_warm: 1
//	    max: 4
//	    screenshot_size: auto
type Config struct {
	// Pools are the pools, each with a unique name. At least one.
	Pools []PoolConfig `yaml:"pools"`
	// Host memory is not declared here: vmm owns admission and refuses a
	// VM the host cannot hold (vmm.ErrInsufficientResources); the pools
	// bound only their own counts (PoolConfig.Max).
	// MaxBoots bounds concurrent boots across all pools. Default 1: under
	// TCG on 2 cores two boots at once each take more than twice as long.
	MaxBoots int `yaml:"max_boots,omitempty"`
}

// PoolConfig declares one pool.
type PoolConfig struct {
	// Name identifies the pool in the API ("pool" of POST /v1/episodes).
	// Lower-case letters, digits, '-' and '_'. Required.
	Name string `yaml:"name"`
	// Image is the guest image recipe, e.g. "desktop" or "tiny". Required.
	Image string `yaml:"image"`
	// MemoryMiB is each VM's RAM; default vmm.DefaultMemoryMiB.
	MemoryMiB int `yaml:"memory_mib,omitempty"`
	// VCPUs is each VM's virtual CPUs; default vmm.DefaultVCPUs.
	VCPUs int `yaml:"vcpus,omitempty"`
	// Width and Height are the guest screen; default 1280x800.
	Width  int `yaml:"width,omitempty"`
	Height int `yaml:"height,omitempty"`
	// MinWarm is how many unleased ready VMs the pool keeps booted. Default 0.
	MinWarm int `yaml:"min_warm"`
	// Max bounds the pool's VMs, warm, leased and booting together.
	// Default max(MinWarm, 1).
	Max int `yaml:"max,omitempty"`
	// ScreenshotSize is what the agent sees on the pool's episodes when a
	// request names none: "auto", "native" or "WxH". Default "auto".
	ScreenshotSize string `yaml:"screenshot_size,omitempty"`
	// DefaultTTL is an episode's lease when POST /v1/episodes names no
	// ttl_s. Default DefaultTTL.
	DefaultTTL Seconds `yaml:"default_ttl_s,omitempty"`
	// MaxTTL bounds ttl_s. Default DefaultMaxTTL.
	MaxTTL Seconds `yaml:"max_ttl_s,omitempty"`
	// Network is the VMs' network (vmm.CreateOptions.Network): "none"
	// (default: no route anywhere) or "user" (outbound through QEMU's
	// user-mode stack).
	Network string `yaml:"network,omitempty"`
	// Forwards are guest TCP ports each VM gets a host port for, on the
	// host's loopback (picked per VM; the VM's record lists them). With
	// network none the guest still reaches nothing: the forwards ride a
	// restricted user-mode stack.
	Forwards []int `yaml:"forwards,omitempty"`
	// Record keeps the trajectory of each of the pool's episodes (package
	// trajectory) unless its start says otherwise (POST /v1/episodes
	// "record"). Default false.
	Record bool `yaml:"record,omitempty"`
	// RecordOptions are what those recordings keep beyond the steps,
	// screenshots and video, when the start names none.
	RecordOptions RecordOptions `yaml:"record_options,omitempty"`
}

// RecordOptions are what a recording keeps beyond the steps, screenshots
// and video (api.RecordOptions).
type RecordOptions struct {
	// A11y keeps the accessibility tree after each step (images with
	// AT-SPI).
	A11y bool `yaml:"a11y,omitempty"`
	// KeepFiles keeps the contents of files read and written, not only
	// their hashes.
	KeepFiles bool `yaml:"keep_files,omitempty"`
	// NoVideo records no video.
	NoVideo bool `yaml:"no_video,omitempty"`
}

// Seconds is a duration written as a number of seconds.
type Seconds float64

// Duration converts s.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// Defaults.
const (
	DefaultMaxBoots = 1
	DefaultTTL      = Seconds(30 * 60)
	DefaultMaxTTL   = Seconds(24 * 60 * 60)
	DefaultPoolName = "desktop"
	DefaultImage    = "desktop"
	// OSWorldPoolName is the default config's pool for OSWorld's harness
	// (package osworld): image osworld at OSWorld's 1920x1080, Chrome's
	// DevTools (9222) and VLC's web interface (8080) forwarded, no warm VM.
	OSWorldPoolName = "osworld"
)

// osworldPool is the default config's OSWorld pool.
var osworldPool = PoolConfig{Name: OSWorldPoolName, Image: "osworld", MemoryMiB: 2048, VCPUs: 2,
	Width: 1920, Height: 1080, Forwards: []int{9222, 8080}}

// DefaultConfig is the config without a file: pool "desktop" of image
// image (DefaultImage when empty) keeping minWarm VMs warm, first (the pool
// of an episode that names none), and pool "osworld" with none warm.
func DefaultConfig(image string, minWarm int) Config {
	if image == "" {
		image = DefaultImage
	}
	osw := osworldPool
	osw.Forwards = slices.Clone(osw.Forwards)
	c := Config{Pools: []PoolConfig{{Name: DefaultPoolName, Image: image, MinWarm: minWarm}, osw}}
	c.SetDefaults()
	return c
}

// LoadConfig reads and validates a YAML config file.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read pool config %s: %w", path, err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("pool config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes YAML (unknown keys are errors), fills defaults and
// validates.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	if c.MaxBoots == 0 {
		c.MaxBoots = DefaultMaxBoots
	}
	for i := range c.Pools {
		p := &c.Pools[i]
		if p.MemoryMiB == 0 {
			p.MemoryMiB = vmm.DefaultMemoryMiB
		}
		if p.VCPUs == 0 {
			p.VCPUs = vmm.DefaultVCPUs
		}
		if p.Width == 0 && p.Height == 0 {
			p.Width, p.Height = vmm.DefaultWidth, vmm.DefaultHeight
		}
		if p.Max == 0 {
			p.Max = max(p.MinWarm, 1)
		}
		if p.ScreenshotSize == "" {
			p.ScreenshotSize = "auto"
		}
		if p.DefaultTTL == 0 {
			p.DefaultTTL = DefaultTTL
		}
		if p.MaxTTL == 0 {
			p.MaxTTL = DefaultMaxTTL
		}
	}
}

var poolName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks every field; the error names the pool and field at fault.
func (c Config) Validate() error { return c.validate(true) }

// validate is Validate; with needPools false a config of no pools is valid
// (SetPools: a cluster that declares none for now).
func (c Config) validate(needPools bool) error {
	var errs []error
	bad := func(where, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %w: %s", where, ErrInvalidConfig, fmt.Sprintf(format, args...)))
	}
	if needPools && len(c.Pools) == 0 {
		bad("pools", "at least one pool is required")
	}
	if c.MaxBoots < 1 {
		bad("max_boots", "must be at least 1, got %d", c.MaxBoots)
	}
	seen := map[string]bool{}
	for i, p := range c.Pools {
		where := fmt.Sprintf("pools[%d]", i)
		if p.Name != "" {
			where = fmt.Sprintf("pool %q", p.Name)
		}
		switch {
		case !poolName.MatchString(p.Name):
			bad(where+" name", "%q: want lower-case letters, digits, '-' or '_' (at most 63)", p.Name)
		case seen[p.Name]:
			bad(where+" name", "declared twice")
		}
		seen[p.Name] = true
		// What the pool's VMs are made with is checked by vmm's own rules.
		if _, err := p.createOptions().Normalize(); err != nil {
			msg := err.Error()
			var fe *fielderr.Error
			if errors.As(err, &fe) {
				msg = fe.Msg
			}
			bad(where+" "+fielderr.Field(err), "%s", msg)
		}
		if p.MinWarm < 0 {
			bad(where+" min_warm", "must not be negative, got %d", p.MinWarm)
		}
		if p.Max < 1 || p.Max < p.MinWarm {
			bad(where+" max", "%d: must be at least 1 and at least min_warm (%d)", p.Max, p.MinWarm)
		}
		if _, err := player.ParseScreenshotSize(p.ScreenshotSize); err != nil {
			bad(where+" screenshot_size", "%v (accepted: auto, native, WxH)", err)
		}
		if p.DefaultTTL <= 0 || p.MaxTTL <= 0 || p.DefaultTTL > p.MaxTTL {
			bad(where+" default_ttl_s", "%g: must be positive and at most max_ttl_s (%g)", p.DefaultTTL, p.MaxTTL)
		}
	}
	return errors.Join(errs...)
}

// Override applies one "POOL.FIELD=VALUE" setting, as given to
// `deskfarm serve --pool`, e.g. "desktop.min_warm=2". Validate afterwards.
func (c *Config) Override(s string) error {
	key, val, ok := strings.Cut(s, "=")
	name, field, ok2 := strings.Cut(key, ".")
	if !ok || !ok2 {
		return fmt.Errorf("pool override %q: %w: want POOL.FIELD=VALUE (e.g. desktop.min_warm=2)", s, ErrInvalidConfig)
	}
	var p *PoolConfig
	for i := range c.Pools {
		if c.Pools[i].Name == name {
			p = &c.Pools[i]
		}
	}
	if p == nil {
		return fmt.Errorf("pool override %q: %w: no pool %q", s, ErrInvalidConfig, name)
	}
	num := func(dst *int) error {
		n, err := strconv.Atoi(val)
		if err != nil {
			return fmt.Errorf("pool override %q: %w: %s is not an integer", s, ErrInvalidConfig, val)
		}
		*dst = n
		return nil
	}
	flag := func(dst *bool) error {
		b, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("pool override %q: %w: %s is not true or false", s, ErrInvalidConfig, val)
		}
		*dst = b
		return nil
	}
	secs := func(dst *Seconds) error {
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("pool override %q: %w: %s is not a number of seconds", s, ErrInvalidConfig, val)
		}
		*dst = Seconds(f)
		return nil
	}
	switch field {
	case "image":
		p.Image = val
	case "screenshot_size":
		p.ScreenshotSize = val
	case "network":
		p.Network = val
	case "memory_mib":
		return num(&p.MemoryMiB)
	case "vcpus":
		return num(&p.VCPUs)
	case "width":
		return num(&p.Width)
	case "height":
		return num(&p.Height)
	case "min_warm":
		return num(&p.MinWarm)
	case "max":
		return num(&p.Max)
	case "default_ttl_s":
		return secs(&p.DefaultTTL)
	case "max_ttl_s":
		return secs(&p.MaxTTL)
	case "record":
		return flag(&p.Record)
	case "record_options.a11y":
		return flag(&p.RecordOptions.A11y)
	case "record_options.keep_files":
		return flag(&p.RecordOptions.KeepFiles)
	case "record_options.no_video":
		return flag(&p.RecordOptions.NoVideo)
	default:
		return fmt.Errorf("pool override %q: %w: unknown field %q", s, ErrInvalidConfig, field)
	}
	return nil
}

// pool returns the named pool's config.
func (c Config) pool(name string) (PoolConfig, bool) {
	for _, p := range c.Pools {
		if p.Name == name {
			return p, true
		}
	}
	return PoolConfig{}, false
}

// createOptions is what a pool's VMs are made with.
func (p PoolConfig) createOptions() vmm.CreateOptions {
	o := vmm.CreateOptions{Image: p.Image, MemoryMiB: p.MemoryMiB, VCPUs: p.VCPUs, Width: p.Width, Height: p.Height, Network: p.Network}
	for _, g := range p.Forwards {
		o.Forwards = append(o.Forwards, vmm.Forward{GuestPort: g}) // host port picked by vmm
	}
	return o
}

// shape is what a VM is made with: what a pool's VMs share, and what a
// change of the pool's spec (SetPools, a restart with another config)
// replaces them for. Counts, TTLs and the screenshot size are not part of
// it: they apply to the VMs a pool has.
type shape struct {
	image                           string
	memoryMiB, vcpus, width, height int
	network                         string
	forwards                        string // guest ports, in order
}

// shape is what p's VMs are made with.
func (p PoolConfig) shape() shape {
	ports := make([]string, len(p.Forwards))
	for i, g := range p.Forwards {
		ports[i] = strconv.Itoa(g)
	}
	return shape{image: p.Image, memoryMiB: p.MemoryMiB, vcpus: p.VCPUs, width: p.Width, height: p.Height,
		network: cmp.Or(p.Network, vmm.NetworkNone), forwards: strings.Join(ports, ",")}
}

// shapeOf is what vm was made with, as vmm records it.
func shapeOf(vm vmm.VM) shape {
	made := PoolConfig{Image: vm.Image, MemoryMiB: vm.MemoryMiB, VCPUs: vm.VCPUs, Width: vm.Width, Height: vm.Height, Network: vm.Network}
	for _, f := range vm.Forwards {
		made.Forwards = append(made.Forwards, f.GuestPort)
	}
	return made.shape()
}

// matches reports whether vm was made to p's spec.
func (p PoolConfig) matches(vm vmm.VM) bool { return shapeOf(vm) == p.shape() }
