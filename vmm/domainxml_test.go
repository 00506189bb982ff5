package vmm

import (
	"encoding/xml"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMetadataRoundTrip(t *testing.T) {
	m := metadata{ID: "ab12", Image: "tiny", ImageHash: "ff", State: StateReady, Dir: "/var/lib/deskfarm/vms/ab12",
		Accel: "tcg", Width: 1280, Height: 800, MemoryMiB: 512, VCPUs: 1, Created: time.Unix(1700000000, 0).UTC(), BootSeconds: 9.5,
		Labels: []label{{Key: "episode", Value: "ep-1"}, {Key: "pool", Value: "desktop"}}}
	s, err := m.marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, metadataNS) {
		t.Fatalf("namespace missing: %s", s)
	}
	// libvirt hands the element back with its own prefix: parse that form too.
	prefixed := strings.NewReplacer("<vm xmlns=", "<deskfarm:vm xmlns:deskfarm=", "</vm>", "</deskfarm:vm>").Replace(s)
	for _, in := range []string{s, prefixed} {
		got, err := parseMetadata(in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip: got %+v want %+v", got, m)
		}
	}
	if _, err := parseMetadata("<vm></vm>"); err == nil {
		t.Fatal("metadata without id accepted")
	}
}

func TestDomainXMLIsWellFormed(t *testing.T) {
	spec := domainSpec{Name: "deskfarm-x", Meta: metadata{ID: "x", Image: "tiny"}, Accel: "tcg", MemoryMiB: 256, VCPUs: 1,
		Kernel: "/k", Initrd: "/i", Cmdline: "console=ttyS0 a='b' <c>", Overlay: "/o & p", VNCSocket: "/v", SessionSock: "/s",
		ConsoleLog: "/c", Emulator: "/usr/bin/qemu-system-x86_64"}
	s, err := domainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Type    string `xml:"type,attr"`
		Cmdline string `xml:"os>cmdline"`
		Disk    struct {
			Source struct {
				File string `xml:"file,attr"`
			} `xml:"source"`
		} `xml:"devices>disk"`
	}
	if err := xml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("domain xml does not parse: %v\n%s", err, s)
	}
	if v.Type != "qemu" || v.Cmdline != spec.Cmdline || v.Disk.Source.File != spec.Overlay {
		t.Fatalf("got %+v", v)
	}
	spec.Accel = "kvm"
	s, _ = domainXML(spec)
	if !strings.Contains(s, "<domain type='kvm'>") || !strings.Contains(s, "host-passthrough") {
		t.Fatalf("kvm domain: %s", s)
	}
}
