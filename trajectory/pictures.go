package trajectory

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"image"
	"os"
	"path/filepath"

	"github.com/deskfarm/deskfarm/player"
)

// pictures writes a recording's screenshots, each picture once: files are
// named by the SHA-256 of their bytes, and pictures already written are
// found again by a hash of their pixels (a step's before is usually the
// previous step's after, and a still screen is one picture for many
// steps). Encoding is PNG at png.BestSpeed (player.Encode) and scaling
// uses the filter the agent's screenshots use (player.Scaler), so a before
// looks like what the agent would have been sent. Only the writer
// goroutine uses it.
type pictures struct {
	dir    string
	native image.Point
	seed   maphash.Seed
	byPix  map[uint64]*picFiles
	// shas holds the hex SHA-256 of each file written, by name.
	shas map[string]string
	// lastImg is the last picture hashed: snapshots are reused while the
	// screen is still, so the same pointer comes back often.
	lastImg *image.RGBA
	lastKey uint64
	written int64
}

// picFiles are the files of one picture: native and per agent size.
type picFiles struct {
	native string
	scaled map[image.Point]string
}

func newPictures(dir string, native image.Point) *pictures {
	return &pictures{dir: dir, native: native, seed: maphash.MakeSeed(), byPix: map[uint64]*picFiles{}, shas: map[string]string{}}
}

func (p *pictures) files4(img *image.RGBA) *picFiles {
	key := p.lastKey
	if img != p.lastImg {
		var h maphash.Hash
		h.SetSeed(p.seed)
		fmt.Fprintf(&h, "%v;", img.Rect)
		h.Write(img.Pix)
		key = h.Sum64()
		p.lastImg, p.lastKey = img, key
	}
	f := p.byPix[key]
	if f == nil {
		f = &picFiles{scaled: map[image.Point]string{}}
		p.byPix[key] = f
	}
	return f
}

// keep writes data under sub/ named by its hash (once); it returns the
// name relative to the trajectory's deskfarm/ and the bytes written now.
func (p *pictures) keep(sub string, data []byte, ext string) (string, int64, error) {
	sum := sha256.Sum256(data)
	name := sub + "/" + hex.EncodeToString(sum[:8]) + ext
	if p.shas[name] != "" {
		return name, 0, nil
	}
	if err := os.MkdirAll(filepath.Join(p.dir, sub), 0o755); err != nil {
		return "", 0, err
	}
	path := filepath.Join(p.dir, filepath.FromSlash(name))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		os.Remove(path)
		return "", 0, fmt.Errorf("write %s: %w", name, err)
	}
	p.shas[name] = hex.EncodeToString(sum[:])
	return name, int64(len(data)), nil
}

func (p *pictures) flushWritten() int64 {
	n := p.written
	p.written = 0
	return n
}

// encode writes img at size (scaled from native when smaller).
func (p *pictures) encode(sub string, img *image.RGBA, size image.Point) (string, []byte, error) {
	if size != img.Rect.Size() {
		sc, err := player.NewScaler(img.Rect.Dx(), img.Rect.Dy(),
			player.ScreenshotSize{Mode: player.SizeFixed, Width: size.X, Height: size.Y})
		if err != nil {
			return "", nil, fmt.Errorf("scale to %s: %w", sizeText(size), err)
		}
		img = sc.Screenshot(img)
	}
	b, _, err := player.Encode(img, player.EncodeOptions{})
	if err != nil {
		return "", nil, err
	}
	name, n, err := p.keep(sub, b, ".png")
	p.written += n
	return name, b, err
}

// scaled is img's file at the agent's size, written if new.
func (p *pictures) scaled(img *image.RGBA, size image.Point) (string, error) {
	f := p.files4(img)
	if name := f.scaled[size]; name != "" {
		return name, nil
	}
	if size == img.Rect.Size() && f.native != "" {
		f.scaled[size] = f.native
		return f.native, nil
	}
	name, _, err := p.encode("screens", img, size)
	if err != nil {
		return "", err
	}
	f.scaled[size] = name
	if size == img.Rect.Size() {
		f.native = name
	}
	return name, nil
}

// nativeFile is img's file at native size, written if new.
func (p *pictures) nativeFile(img *image.RGBA) (string, error) {
	f := p.files4(img)
	if f.native != "" {
		return f.native, nil
	}
	if name := f.scaled[img.Rect.Size()]; name != "" {
		f.native = name
		return name, nil
	}
	name, _, err := p.encode("native", img, img.Rect.Size())
	if err != nil {
		return "", err
	}
	f.native = name
	return name, nil
}

// step writes a step's pictures and names them in its Screenshots; the
// base64 of the agent's image in its Response becomes "sha256:<hex>".
func (p *pictures) step(j *job) error {
	s := &j.step
	sc := &s.Screenshots
	if len(j.afterImage) > 0 {
		sum := sha256.Sum256(j.afterImage)
		sc.AfterSHA256 = hex.EncodeToString(sum[:])
		s.Response = replaceImage(s.Response, j.afterImage, "sha256:"+sc.AfterSHA256)
	}
	if !j.hasPictures {
		return nil
	}
	var err error
	if j.before != nil {
		if sc.Before, err = p.scaled(j.before, j.size); err != nil {
			return err
		}
		if sc.BeforeNative, err = p.nativeFile(j.before); err != nil {
			return err
		}
	}
	png := isPNG(j.afterImage)
	switch {
	case len(j.afterImage) > 0:
		ext := ".png"
		if !png {
			ext = ".jpg"
		}
		var n int64
		if sc.After, n, err = p.keep("screens", j.afterImage, ext); err != nil {
			return err
		}
		p.written += n
		if j.afterNative != nil && png {
			// The next step's before, unchanged, is this very picture.
			f := p.files4(j.afterNative)
			if f.scaled[j.size] == "" {
				f.scaled[j.size] = sc.After
			}
		}
	case j.afterNative != nil:
		if sc.After, err = p.scaled(j.afterNative, j.size); err != nil {
			return err
		}
		sc.AfterSHA256 = p.shas[sc.After]
	}
	if j.afterNative != nil {
		if sc.AfterNative, err = p.nativeFile(j.afterNative); err != nil {
			return err
		}
	}
	return nil
}

func isPNG(b []byte) bool { return bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) }

// replaceImage replaces the standard base64 of img in body (a JSON answer
// carries its image as a base64 string, in a data: URL or not) by with.
func replaceImage(body, img []byte, with string) []byte {
	if len(body) == 0 {
		return body
	}
	b64 := make([]byte, base64.StdEncoding.EncodedLen(len(img)))
	base64.StdEncoding.Encode(b64, img)
	return bytes.ReplaceAll(body, b64, []byte(with))
}
