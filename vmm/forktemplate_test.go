package vmm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestImportForkChecks: a template another node streams is kept only when
// it is what its description says, for this node's image and accelerator;
// a refused one leaves no file.
func TestImportForkChecks(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), nil)
	ctx := context.Background()
	body := bytes.Repeat([]byte("qcow2 and RAM "), 1000)
	sum := sha256.Sum256(body)
	good := ForkTemplateInfo{Snapshot: forkSnapshotPrefix + "0123456789", Image: "tiny", ImageHash: "abc", ImageBuild: "b1", Accel: "tcg",
		MemoryMiB: 256, VCPUs: 1, Width: 1024, Height: 768, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
	for _, tc := range []struct {
		name  string
		info  func(i *ForkTemplateInfo)
		body  []byte
		field string
	}{
		{"short body", nil, body[:len(body)-1], "size"},
		{"long body", nil, append(bytes.Clone(body), 'x'), "size"},
		{"other hash", func(i *ForkTemplateInfo) { i.SHA256 = hex.EncodeToString(make([]byte, 32)) }, body, "sha256"},
		{"path in the name", func(i *ForkTemplateInfo) { i.Snapshot = forkSnapshotPrefix + "../../etc" }, body, "snapshot"},
		{"no fork's name", func(i *ForkTemplateInfo) { i.Snapshot = "named" }, body, "snapshot"},
		{"over the bound", func(i *ForkTemplateInfo) { i.Size = MaxForkTemplateBytes + 1 }, body, "size"},
		{"other accelerator", func(i *ForkTemplateInfo) { i.Accel = "kvm" }, body, "accel"},
		{"rebuilt image", func(i *ForkTemplateInfo) { i.ImageHash = "def" }, body, ""},
		// The same recipe built on another node: another disk.
		{"another build", func(i *ForkTemplateInfo) { i.ImageBuild = "b2" }, body, ""},
		{"no build", func(i *ForkTemplateInfo) { i.ImageBuild = "" }, body, ""},
	} {
		i := good
		if tc.info != nil {
			tc.info(&i)
		}
		_, err := f.m.ImportFork(ctx, i, bytes.NewReader(tc.body))
		if tc.field == "" {
			if !errors.Is(err, ErrBrokenImage) {
				t.Errorf("%s: %v, want ErrBrokenImage", tc.name, err)
			}
		} else if !errors.Is(err, ErrInvalid) || !bytes.Contains([]byte(err.Error()), []byte(tc.field)) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", tc.name, err, tc.field)
		}
		if left, _ := filepath.Glob(filepath.Join(f.m.forksDir(), "*")); len(left) > 0 {
			t.Fatalf("%s: refused template left %v", tc.name, left)
		}
	}
	tm, err := f.m.ImportFork(ctx, good, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(tm.path); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("imported template: %d bytes, %v", len(got), err)
	}
	if err := tm.Remove(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(f.m.forksDir(), "*")); len(left) > 0 {
		t.Fatalf("removed template left %v", left)
	}
}
