package vmm

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// A VM being reset is described as it is: ready, with its labels and
// image, not as a half-known VM "creating" (what Get and List said while a
// reset held the VM's lock), and describing it does not wait for the reset.
func TestDescribeDuringReset(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, nil)
	opts := tinyOpts
	opts.Labels = map[string]string{"pool": "p1"}
	vm, err := f.m.Create(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	hv.mu.Lock()
	hv.block["hmp:loadvm"] = release
	hv.mu.Unlock()
	done := make(chan error, 1)
	go func() { _, err := f.m.Reset(context.Background(), vm.ID); done <- err }()
	for !slices.Contains(hv.callList(), "hmp:loadvm") {
		time.Sleep(5 * time.Millisecond)
	}
	got, err := f.m.Get(context.Background(), vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateReady || got.Labels["pool"] != "p1" || got.ImageHash != "abc" || got.VNCSocket == "" || got.Start != StartBoot {
		t.Errorf("during a reset Get says %+v; want it ready, labelled pool=p1, with its image hash, socket and start", got)
	}
	list, _ := f.m.List(context.Background())
	if len(list) != 1 || list[0].State != StateReady || list[0].Labels["pool"] != "p1" {
		t.Errorf("during a reset List says %+v", list)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, _ := f.m.Get(context.Background(), vm.ID); got.Resets != 1 || got.State != StateReady {
		t.Errorf("after the reset: %+v", got)
	}
}

// Create takes its options as Normalize leaves them, and leaves the
// caller's value alone: host ports it picks are not written into it.
func TestCreateLeavesOptionsAlone(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), nil)
	opts := tinyOpts
	opts.Forwards = []Forward{{GuestPort: 22}}
	opts.Labels = map[string]string{"pool": "p1"}
	vm, err := f.m.Create(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Forwards[0].HostPort != 0 || opts.Network != "" || opts.Width != 0 {
		t.Errorf("Create changed its argument: %+v", opts)
	}
	if vm.Forwards[0].HostPort == 0 || vm.Network != NetworkNone || vm.Width != DefaultWidth {
		t.Errorf("vm %+v: want a picked host port, network none, the default width", vm)
	}
}

func TestNormalize(t *testing.T) {
	got, err := CreateOptions{Image: "tiny"}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	want := CreateOptions{Image: "tiny", MemoryMiB: DefaultMemoryMiB, VCPUs: DefaultVCPUs, Width: DefaultWidth, Height: DefaultHeight, Network: NetworkNone}
	if !equalOptions(got, want) {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}
	again, err := got.Normalize()
	if err != nil || !equalOptions(again, got) {
		t.Errorf("normalising a normalised value: %+v, %v", again, err)
	}

	in := CreateOptions{Image: "tiny", Labels: map[string]string{"a": "b"}, Forwards: []Forward{{GuestPort: 80}}}
	out, err := in.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	out.Labels["a"], out.Forwards[0].GuestPort = "changed", 81
	if in.Labels["a"] != "b" || in.Forwards[0].GuestPort != 80 {
		t.Errorf("the normalised value shares its labels or forwards with the argument: %+v", in)
	}

	for _, c := range []struct {
		opts  CreateOptions
		field string
	}{
		{CreateOptions{}, "image"},
		{CreateOptions{Image: "t", MemoryMiB: 64}, "memory_mib"},
		{CreateOptions{Image: "t", MemoryMiB: -1}, "memory_mib"},
		{CreateOptions{Image: "t", VCPUs: -1}, "vcpus"},
		{CreateOptions{Image: "t", Width: 1366, Height: 768}, "width"},
		{CreateOptions{Image: "t", Width: -8, Height: 768}, "width"},
		{CreateOptions{Image: "t", Width: 1024}, "height"},
		{CreateOptions{Image: "t", Height: -8}, "height"},
		{CreateOptions{Image: "t", Height: 768}, "width"},
		{CreateOptions{Image: "t", Width: 1024, Height: 4000}, "height"},
		{CreateOptions{Image: "t", Network: "bridge"}, "network"},
		{CreateOptions{Image: "t", Forwards: []Forward{{GuestPort: 0}}}, "forwards[0].guest_port"},
		{CreateOptions{Image: "t", Forwards: []Forward{{GuestPort: 1, HostPort: 80}}}, "forwards[0].host_port"},
		{CreateOptions{Image: "t", Forwards: []Forward{{GuestPort: 1, HostPort: 2000}, {GuestPort: 2, HostPort: 2000}}}, "forwards[1].host_port"},
		{CreateOptions{Image: "t", Labels: map[string]string{"Bad": "x"}}, "labels"},
	} {
		_, err := c.opts.Normalize()
		if !errors.Is(err, ErrInvalid) || fielderr.Field(err) != c.field {
			t.Errorf("%+v: %v (field %q), want ErrInvalid on %s", c.opts, err, fielderr.Field(err), c.field)
		}
	}
}

func equalOptions(a, b CreateOptions) bool {
	return a.Image == b.Image && a.MemoryMiB == b.MemoryMiB && a.VCPUs == b.VCPUs && a.Boot == b.Boot &&
		a.Width == b.Width && a.Height == b.Height && a.Network == b.Network &&
		slices.Equal(a.Forwards, b.Forwards) && len(a.Labels) == len(b.Labels)
}

// callList returns the calls made so far.
func (f *fakeHV) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}
