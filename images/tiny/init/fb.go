package main

import (
	"errors"
	"fmt"
	"image"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux fbdev and VT ioctls (linux/fb.h, linux/kd.h).
const (
	fbiogetVScreenInfo = 0x4600
	fbiogetFScreenInfo = 0x4602
	kdSetMode          = 0x4b3a
	kdGraphics         = 1
)

type fbBitfield struct {
	Offset, Length, MsbRight uint32
}

// fbVarScreenInfo is struct fb_var_screeninfo.
type fbVarScreenInfo struct {
	Xres, Yres, XresVirtual, YresVirtual uint32
	Xoffset, Yoffset                     uint32
	BitsPerPixel, Grayscale              uint32
	Red, Green, Blue, Transp             fbBitfield
	Nonstd, Activate, Height, Width      uint32
	AccelFlags, Pixclock                 uint32
	LeftMargin, RightMargin              uint32
	UpperMargin, LowerMargin             uint32
	HsyncLen, VsyncLen, Sync, Vmode      uint32
	Rotate, Colorspace                   uint32
	Reserved                             [4]uint32
}

// fbFixScreenInfo is struct fb_fix_screeninfo (64-bit layout).
type fbFixScreenInfo struct {
	ID                             [16]byte
	SmemStart                      uint64
	SmemLen, Type, TypeAux, Visual uint32
	Xpanstep, Ypanstep, Ywrapstep  uint16
	LineLength                     uint32
	MmioStart                      uint64
	MmioLen, Accel                 uint32
	Capabilities                   uint16
	Reserved                       [2]uint16
}

// The kernel's struct sizes; the build fails if the Go layouts differ.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(fbVarScreenInfo{})-160]
	_ = [1]struct{}{}[unsafe.Sizeof(fbFixScreenInfo{})-80]
)

// framebuffer is /dev/fb0 mapped into memory.
type framebuffer struct {
	fd            int // -1 for a framebuffer in plain memory (tests)
	mem           []byte
	width, height int
	stride        int // bytes per line (line_length)
	bytesPP       int
	xoff, yoff    int
	r, g, b, x    fbBitfield
	id            string
}

// waitFramebuffer waits for dev to appear, then opens and maps it and puts
// the console in graphics mode so fbcon leaves the screen alone.
func waitFramebuffer(dev string, timeout time.Duration) (*framebuffer, error) {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(dev); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no %s after %v", dev, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	graphicsMode()
	return openFramebuffer(dev)
}

// graphicsMode switches the current VT to KD_GRAPHICS: fbcon then neither
// draws text nor blinks a cursor on the framebuffer.
func graphicsMode() {
	fd, err := unix.Open("/dev/tty0", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		logf("open /dev/tty0: %v", err)
		return
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, kdSetMode, kdGraphics); err != nil {
		logf("KDSETMODE KD_GRAPHICS: %v", err)
	}
}

func openFramebuffer(dev string) (*framebuffer, error) {
	fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var v fbVarScreenInfo
	var f fbFixScreenInfo
	if err := ioctlPtr(fd, fbiogetVScreenInfo, unsafe.Pointer(&v)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: FBIOGET_VSCREENINFO: %w", dev, err)
	}
	if err := ioctlPtr(fd, fbiogetFScreenInfo, unsafe.Pointer(&f)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: FBIOGET_FSCREENINFO: %w", dev, err)
	}
	fb := &framebuffer{
		fd:      fd,
		width:   int(v.Xres),
		height:  int(v.Yres),
		stride:  int(f.LineLength),
		bytesPP: int(v.BitsPerPixel) / 8,
		xoff:    int(v.Xoffset),
		yoff:    int(v.Yoffset),
		r:       v.Red, g: v.Green, b: v.Blue, x: v.Transp,
		id: string(f.ID[:clen(f.ID[:])]),
	}
	logf("%s: %s %dx%d %d bpp, line %d bytes, rgb offsets %d/%d/%d",
		dev, fb.id, fb.width, fb.height, v.BitsPerPixel, fb.stride, v.Red.Offset, v.Green.Offset, v.Blue.Offset)
	switch v.BitsPerPixel {
	case 16, 24, 32:
	default:
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %d bits per pixel not supported", dev, v.BitsPerPixel)
	}
	size := int(f.SmemLen)
	need := (fb.yoff+fb.height-1)*fb.stride + (fb.xoff+fb.width)*fb.bytesPP
	if size < need {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %d bytes of video memory, %d needed", dev, size, need)
	}
	fb.mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: mmap %d bytes: %w", dev, size, err)
	}
	return fb, nil
}

// flush copies rectangle r of img to the framebuffer, converting pixels to
// its format, and pushes the change out at once (fsync flushes DRM fbdev's
// deferred I/O instead of letting it wait for its timer).
func (fb *framebuffer) flush(img *image.RGBA, r image.Rectangle) {
	if fb == nil {
		return
	}
	r = r.Intersect(img.Rect).Intersect(image.Rect(0, 0, fb.width, fb.height))
	if r.Empty() {
		return
	}
	fast := fb.bytesPP == 4 && fb.r == (fbBitfield{Offset: 16, Length: 8}) &&
		fb.g == (fbBitfield{Offset: 8, Length: 8}) && fb.b == (fbBitfield{Offset: 0, Length: 8})
	for y := r.Min.Y; y < r.Max.Y; y++ {
		src := img.Pix[img.PixOffset(r.Min.X, y):img.PixOffset(r.Max.X, y)]
		off := (y+fb.yoff)*fb.stride + (r.Min.X+fb.xoff)*fb.bytesPP
		dst := fb.mem[off : off+r.Dx()*fb.bytesPP]
		if fast { // XRGB8888: bytes B, G, R, X
			for i, j := 0, 0; i < len(src); i, j = i+4, j+4 {
				dst[j], dst[j+1], dst[j+2], dst[j+3] = src[i+2], src[i+1], src[i], 0xff
			}
			continue
		}
		for i, j := 0, 0; i < len(src); i, j = i+4, j+fb.bytesPP {
			px := pack(src[i], fb.r) | pack(src[i+1], fb.g) | pack(src[i+2], fb.b) | pack(0xff, fb.x)
			for k := 0; k < fb.bytesPP; k++ {
				dst[j+k] = byte(px >> (8 * k))
			}
		}
	}
	if fb.fd < 0 {
		return
	}
	if err := unix.Fsync(fb.fd); err != nil && !errors.Is(err, unix.EINVAL) {
		logf("fsync framebuffer: %v", err)
	}
}

// pack places 8-bit component c in bitfield f.
func pack(c uint8, f fbBitfield) uint32 {
	if f.Length == 0 {
		return 0
	}
	v := uint32(c)
	if f.Length < 8 {
		v >>= 8 - f.Length
	}
	return v << f.Offset
}

func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}
