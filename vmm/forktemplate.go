package vmm

// Fork templates that travel: a fork across a cluster's nodes makes the
// source's template once (ExportFork), streams it once to each node that
// takes a share (the cluster's node-to-node HTTP), where ImportFork checks
// and stores it and Fork (ForkOptions.Template) makes that node's share
// from the one copy. A template is one qcow2 file: the source's overlay,
// whose transfer snapshot holds the RAM and device state (savevm), and its
// ready snapshot, which the forks reset to. It backs onto the base image
// by path, so a node takes it only with the same build of the same image
// (BaseImage.Build: a copy of the source node's cache entry) and
// accelerator.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// MaxForkTemplateBytes bounds a template ImportFork takes: a guest's RAM
// (at most 64 GiB, CreateOptions' bound) and a disk's writes.
const MaxForkTemplateBytes int64 = 128 << 30

// ForkTemplateInfo describes a fork template: what a receiving node needs
// to make VMs from it and to check it. It travels as JSON.
type ForkTemplateInfo struct {
	// Snapshot is the transfer snapshot inside the file.
	Snapshot  string `json:"snapshot"`
	Image     string `json:"image"`
	ImageHash string `json:"image_hash"`
	// ImageBuild is the image's build (BaseImage.Build): a node takes the
	// template only on the same build, a copy of the source node's image.
	ImageBuild string `json:"image_build"`
	Accel      string `json:"accel"`
	MemoryMiB  int    `json:"memory_mib"`
	VCPUs      int    `json:"vcpus"`
	Width      int    `json:"width"`
	Height     int    `json:"height"`
	Network    string `json:"network,omitempty"`
	// GuestPorts are the source's forwarded guest ports; each fork gets
	// host ports of its own.
	GuestPorts []int `json:"guest_ports,omitempty"`
	// Size and SHA256 (hex) are the file's.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Source is the VM it was made from (for logs).
	Source string `json:"source,omitempty"`
}

// ForkTemplate is a fork template on this node's disk, under the state
// dir's forks (a starting Manager empties it).
type ForkTemplate struct {
	Info ForkTemplateInfo
	path string
}

// Open reads the template's file.
func (t *ForkTemplate) Open() (*os.File, error) { return os.Open(t.path) }

// Remove deletes the template's file; forks made from it keep their own
// copies.
func (t *ForkTemplate) Remove() error {
	if err := os.Remove(t.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// spec is the machine spec forks of t copy (ID, Dir and host ports are
// each fork's own).
func (t *ForkTemplate) spec() machineSpec {
	i := t.Info
	s := machineSpec{Image: i.Image, ImageHash: i.ImageHash, ImageBuild: i.ImageBuild, Accel: i.Accel, Width: i.Width, Height: i.Height,
		MemoryMiB: i.MemoryMiB, VCPUs: i.VCPUs, Network: i.Network}
	for _, p := range i.GuestPorts {
		s.Forwards = append(s.Forwards, Forward{GuestPort: p})
	}
	return s
}

// ExportFork makes a fork template of VM id's current RAM, devices and
// disk, as Fork does (the VM pauses for the save and the copy, then runs
// on), and hashes it. The caller owns it and removes it when done.
func (m *Manager) ExportFork(ctx context.Context, id string) (*ForkTemplate, error) {
	start := time.Now()
	src, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	if _, err := m.forkImage(src.spec); err != nil {
		return nil, fmt.Errorf("export fork of vm %s: %w", id, err)
	}
	path, snap, err := m.forkTemplate(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("export fork of vm %s: %w", id, err)
	}
	paused := time.Since(start)
	t := &ForkTemplate{path: path, Info: ForkTemplateInfo{Snapshot: snap, Image: src.spec.Image, ImageHash: src.spec.ImageHash,
		ImageBuild: src.spec.ImageBuild, Accel: src.spec.Accel, MemoryMiB: src.spec.MemoryMiB, VCPUs: src.spec.VCPUs, Width: src.spec.Width,
		Height: src.spec.Height, Network: src.spec.Network, Source: id}}
	for _, f := range src.spec.Forwards {
		t.Info.GuestPorts = append(t.Info.GuestPorts, f.GuestPort)
	}
	f, err := os.Open(path)
	if err == nil {
		h := sha256.New()
		t.Info.Size, err = io.Copy(h, f)
		f.Close()
		t.Info.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	if err != nil {
		t.Remove()
		return nil, fmt.Errorf("export fork of vm %s: hash template: %w", id, err)
	}
	m.log.Info("fork template made", "vm", id, "op", "fork_export", "bytes", t.Info.Size,
		"source_paused_and_copied", paused.Round(time.Millisecond), "duration", time.Since(start).Round(time.Millisecond))
	return t, nil
}

// ImportFork stores a fork template another node streamed, as info
// describes it: at most min(info.Size, MaxForkTemplateBytes) bytes are
// read, and a file of another size or hash, or for another image or
// accelerator than this node's, is refused (ErrInvalid, or
// ErrBrokenImage for the image) and not kept. The caller owns it.
func (m *Manager) ImportFork(ctx context.Context, info ForkTemplateInfo, body io.Reader) (*ForkTemplate, error) {
	if err := m.checkForkInfo(info); err != nil {
		return nil, fmt.Errorf("import fork of vm %s: %w", info.Source, err)
	}
	path := filepath.Join(m.forksDir(), info.Snapshot+"-"+newID()+".qcow2")
	if err := os.MkdirAll(m.forksDir(), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("import fork of vm %s: %w", info.Source, err)
	}
	h := sha256.New()
	// One byte more than announced shows a longer body.
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, body}, info.Size+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	switch got := hex.EncodeToString(h.Sum(nil)); {
	case err != nil:
		err = fmt.Errorf("receive template: %w", err)
	case n != info.Size:
		err = fielderr.Newf("size", ErrInvalid, "template of %d bytes announced, %d or more sent", info.Size, n)
	case got != info.SHA256:
		err = fielderr.Newf("sha256", ErrInvalid, "template's sha256 is %s, %s announced", got, info.SHA256)
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("import fork of vm %s: %w", info.Source, err)
	}
	return &ForkTemplate{Info: info, path: path}, nil
}

// checkForkInfo refuses a template this node cannot make VMs from.
func (m *Manager) checkForkInfo(i ForkTemplateInfo) error {
	switch {
	case !strings.HasPrefix(i.Snapshot, forkSnapshotPrefix) || !isHexID(i.Snapshot[len(forkSnapshotPrefix):]):
		return fielderr.Newf("snapshot", ErrInvalid, "%q is no transfer snapshot's name", i.Snapshot)
	case i.Size <= 0 || i.Size > MaxForkTemplateBytes:
		return fielderr.Newf("size", ErrInvalid, "%d is outside 1..%d", i.Size, MaxForkTemplateBytes)
	case len(i.SHA256) != sha256.Size*2:
		return fielderr.Newf("sha256", ErrInvalid, "want %d hex digits", sha256.Size*2)
	case i.Accel != m.accel:
		return fielderr.Newf("accel", ErrInvalid, "made under %s, this node runs %s", i.Accel, m.accel)
	}
	if _, err := (&ForkTemplate{Info: i}).validSpec(); err != nil {
		return err
	}
	_, err := m.forkImage((&ForkTemplate{Info: i}).spec())
	return err
}

// validSpec checks the template's VM size as CreateOptions would.
func (t *ForkTemplate) validSpec() (CreateOptions, error) {
	o := CreateOptions{Image: t.Info.Image, MemoryMiB: t.Info.MemoryMiB, VCPUs: t.Info.VCPUs,
		Width: t.Info.Width, Height: t.Info.Height, Network: t.Info.Network}
	if o.MemoryMiB <= 0 || o.VCPUs <= 0 || o.Width <= 0 || o.Height <= 0 {
		return o, fielderr.Newf("memory_mib", ErrInvalid, "template describes no VM size (%+v)", o)
	}
	return o, nil
}

// forkFrom makes opts.Count VMs from t, admitted all together first.
func (m *Manager) forkFrom(ctx context.Context, t *ForkTemplate, opts ForkOptions) ([]VM, error) {
	start := time.Now()
	spec := t.spec()
	img, err := m.forkImage(spec)
	if err != nil {
		return nil, fmt.Errorf("fork from template of vm %s: %w", t.Info.Source, err)
	}
	mcs, unlock := m.forkMachines(spec, opts)
	made := false
	defer func() {
		if !made {
			unlock()
		}
	}()
	if err := m.admitAll(mcs); err != nil {
		return nil, fmt.Errorf("fork from template of vm %s: %w", t.Info.Source, err)
	}
	vms, err := m.makeForks(ctx, mcs, img, spec, readyForkState(t.path, t.Info.Snapshot), false, t.Info.Source)
	if err != nil {
		return nil, fmt.Errorf("fork from template of vm %s: %w", t.Info.Source, err)
	}
	made = true
	m.log.Info("vms forked from a template", "vm", t.Info.Source, "op", "fork", "count", len(vms),
		"duration", time.Since(start).Round(time.Millisecond))
	return vms, nil
}

// ctxReader stops a read once ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// isHexID reports whether s is an id as newID makes them: it names a file.
func isHexID(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil && len(s) == 10
}
