package video

import (
	"bytes"
	"image"
)

// yuvFrame is the picture as ffmpeg takes it: planar YUV 4:2:0 (BT.601,
// limited range, as ffmpeg's own swscale converts by default), kept up to
// date row pair by row pair. Converting here rather than in ffmpeg was
// half of ffmpeg's time per 1280x800 frame, spent again on every frame for
// the whole screen; here a frame converts only the rows that changed
// (found by comparing with the last picture), so typing costs a text line,
// and ffmpeg reads 1.5 bytes a pixel instead of 4.
type yuvFrame struct {
	w, h int    // even
	buf  []byte // Y plane, then U, then V
	prev []byte // the RGBA converted last, w*h*4
	have bool   // prev holds a picture
}

func newYUVFrame(w, h int) *yuvFrame {
	return &yuvFrame{w: w, h: h, buf: make([]byte, w*h*3/2), prev: make([]byte, w*h*4)}
}

// update converts the row pairs of img (w x h, tight stride) that differ
// from the last picture.
func (f *yuvFrame) update(img *image.RGBA) {
	pair := f.w * 8
	for y := 0; y < f.h; y += 2 {
		row := img.Pix[y*f.w*4 : y*f.w*4+pair]
		old := f.prev[y*f.w*4 : y*f.w*4+pair]
		if f.have && bytes.Equal(row, old) {
			continue
		}
		f.convertPair(row, y)
		copy(old, row)
	}
	f.have = true
}

// convertPair converts rows y and y+1, given as 2*w RGBA pixels.
func (f *yuvFrame) convertPair(rgba []byte, y int) {
	w := f.w
	yp := f.buf[:w*f.h]
	up := f.buf[w*f.h : w*f.h+w*f.h/4]
	vp := f.buf[w*f.h+w*f.h/4:]
	y0, y1 := yp[y*w:y*w+w], yp[(y+1)*w:(y+1)*w+w]
	cu, cv := up[y/2*w/2:y/2*w/2+w/2], vp[y/2*w/2:y/2*w/2+w/2]
	top, bot := rgba[:w*4], rgba[w*4:w*8]
	for x := 0; x < w; x += 2 {
		i := x * 4
		r0, g0, b0 := int32(top[i]), int32(top[i+1]), int32(top[i+2])
		r1, g1, b1 := int32(top[i+4]), int32(top[i+5]), int32(top[i+6])
		r2, g2, b2 := int32(bot[i]), int32(bot[i+1]), int32(bot[i+2])
		r3, g3, b3 := int32(bot[i+4]), int32(bot[i+5]), int32(bot[i+6])
		y0[x] = luma(r0, g0, b0)
		y0[x+1] = luma(r1, g1, b1)
		y1[x] = luma(r2, g2, b2)
		y1[x+1] = luma(r3, g3, b3)
		r, g, b := (r0+r1+r2+r3+2)>>2, (g0+g1+g2+g3+2)>>2, (b0+b1+b2+b3+2)>>2
		cu[x/2] = uint8((-38*r-74*g+112*b+128)>>8 + 128)
		cv[x/2] = uint8((112*r-94*g-18*b+128)>>8 + 128)
	}
}

// luma is BT.601's limited-range Y of an 8-bit RGB pixel.
func luma(r, g, b int32) uint8 { return uint8((66*r+129*g+25*b+128)>>8 + 16) }
