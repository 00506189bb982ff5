package vmm

import (
	"encoding/xml"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMetadataRoundTrip(t *testing.T) {
	m := metadata{machineSpec: machineSpec{ID: "ab12", Image: "tiny", ImageHash: "ff", Dir: "/var/lib/deskfarm/vms/ab12",
		Accel: "tcg", Width: 1280, Height: 800, MemoryMiB: 512, VCPUs: 1, Created: time.Unix(1700000000, 0).UTC(), Start: StartBoot,
		Network: NetworkUser, Forwards: []Forward{{GuestPort: 22, HostPort: 2222}}},
		State: StateReady, BootSeconds: 9.5, Labels: []label{{Key: "episode", Value: "ep-1"}, {Key: "pool", Value: "desktop"}}}
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
	// What deskfarm wrote before the spec was split from the state (its
	// elements in the old order): a restarted deskfarm still adopts such VMs.
	old := `<vm xmlns="` + metadataNS + `"><id>ab12</id><image>tiny</image><image-hash>ff</image-hash><state>ready</state>` +
		`<dir>/var/lib/deskfarm/vms/ab12</dir><accel>tcg</accel><width>1280</width><height>800</height><memory-mib>512</memory-mib>` +
		`<vcpus>1</vcpus><created>2023-11-14T22:13:20Z</created><boot-seconds>9.5</boot-seconds><start>boot</start>` +
		`<label key="episode">ep-1</label><label key="pool">desktop</label><network>user</network>` +
		`<forward guest-port="22" host-port="2222"></forward></vm>`
	got, err := parseMetadata(old)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("old form: got %+v want %+v", got, m)
	}
	if _, err := parseMetadata("<vm></vm>"); err == nil {
		t.Fatal("metadata without id accepted")
	}
}

func TestDomainXMLIsWellFormed(t *testing.T) {
	spec := domainSpec{Name: "deskfarm-x", Meta: metadata{machineSpec: machineSpec{ID: "x", Image: "tiny"}}, Accel: "tcg", MemoryMiB: 256, VCPUs: 1,
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
	if !strings.Contains(s, "<domain type='kvm' ") || !strings.Contains(s, "host-passthrough") {
		t.Fatalf("kvm domain: %s", s)
	}
}

type domainView struct {
	Interfaces []struct{} `xml:"devices>interface"`
	SecLabels  []struct {
		Type  string `xml:"type,attr"`
		Model string `xml:"model,attr"`
	} `xml:"seclabel"`
	Args []struct {
		Value string `xml:"value,attr"`
	} `xml:"commandline>arg"`
}

func renderView(t *testing.T, spec domainSpec) domainView {
	t.Helper()
	s, err := domainXML(spec)
	if err != nil {
		t.Fatal(err)
	}
	var v domainView
	if err := xml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("domain xml does not parse: %v\n%s", err, s)
	}
	return v
}

// By default a guest has no network device of any kind; user mode adds one
// NIC whose forwards listen on the host's loopback only.
func TestDomainXMLNetwork(t *testing.T) {
	spec := domainSpec{Name: "deskfarm-x", Meta: metadata{machineSpec: machineSpec{ID: "x"}}, Accel: "tcg", Network: NetworkNone}
	if v := renderView(t, spec); len(v.Interfaces) != 0 || len(v.Args) != 0 {
		t.Fatalf("network none: %+v", v)
	}
	spec.Network = NetworkUser
	spec.Forwards = []Forward{{GuestPort: 9222, HostPort: 19222}, {GuestPort: 8080, HostPort: 18080}}
	v := renderView(t, spec)
	var args []string
	for _, a := range v.Args {
		args = append(args, a.Value)
	}
	want := []string{"-netdev", "user,id=deskfarm-net0,hostfwd=tcp:127.0.0.1:19222-:9222,hostfwd=tcp:127.0.0.1:18080-:8080",
		"-device", "virtio-net-pci,netdev=deskfarm-net0,bus=pci.0,addr=0x1f"}
	if !reflect.DeepEqual(args, want) {
		t.Fatalf("qemu args %q, want %q", args, want)
	}
	// Forwards without network: the same NIC, its stack restricted.
	spec.Network = NetworkNone
	v = renderView(t, spec)
	if len(v.Args) != 4 || v.Args[1].Value != "user,id=deskfarm-net0,restrict=on,hostfwd=tcp:127.0.0.1:19222-:9222,hostfwd=tcp:127.0.0.1:18080-:8080" {
		t.Fatalf("network none with forwards: %+v", v.Args)
	}
}

// On a host with AppArmor or SELinux each QEMU gets a dynamic sVirt label;
// without, labelling is off. DAC relabelling is off either way.
func TestDomainXMLSecurity(t *testing.T) {
	spec := domainSpec{Name: "deskfarm-x", Meta: metadata{machineSpec: machineSpec{ID: "x"}}, Accel: "tcg"}
	v := renderView(t, spec)
	if len(v.SecLabels) != 1 || v.SecLabels[0].Type != "none" || v.SecLabels[0].Model != "" {
		t.Fatalf("no MAC: %+v", v.SecLabels)
	}
	spec.Security = "apparmor"
	v = renderView(t, spec)
	if len(v.SecLabels) != 2 || v.SecLabels[0] != (struct {
		Type  string `xml:"type,attr"`
		Model string `xml:"model,attr"`
	}{"dynamic", "apparmor"}) || v.SecLabels[1].Type != "none" || v.SecLabels[1].Model != "dac" {
		t.Fatalf("apparmor: %+v", v.SecLabels)
	}
}

func TestMACModel(t *testing.T) {
	for caps, want := range map[string]string{
		// virsh capabilities on this host (libvirt 9.0, Debian 12), secmodel part.
		"<capabilities><host><secmodel><model>none</model><doi>0</doi></secmodel><secmodel><model>dac</model><doi>0</doi><baselabel type='kvm'>+64055:+64055</baselabel></secmodel></host></capabilities>": "",
		// Hand-made in the same shape for hosts with a MAC model.
		"<capabilities><host><secmodel><model>apparmor</model><doi>0</doi></secmodel><secmodel><model>dac</model></secmodel></host></capabilities>": "apparmor",
		"<capabilities><host><secmodel><model>selinux</model><doi>0</doi></secmodel></host></capabilities>":                                         "selinux",
		"not xml": "",
	} {
		if got := macModel(caps); got != want {
			t.Errorf("macModel(%.60q) = %q, want %q", caps, got, want)
		}
	}
}

// A guest gets a virtio balloon with free page reporting unless the farm
// turns it off; a saved ready state made with one device set is never
// loaded by a VM of the other.
func TestDomainXMLBalloon(t *testing.T) {
	var v struct {
		Balloons []struct {
			Model     string `xml:"model,attr"`
			Reporting string `xml:"freePageReporting,attr"`
		} `xml:"devices>memballoon"`
	}
	render := func(balloon bool) {
		t.Helper()
		spec := domainSpec{Name: "deskfarm-x", Meta: metadata{machineSpec: machineSpec{ID: "x"}}, Accel: "tcg", Balloon: balloon}
		s, err := domainXML(spec)
		if err != nil {
			t.Fatal(err)
		}
		v.Balloons = nil
		if err := xml.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("domain xml does not parse: %v\n%s", err, s)
		}
		if len(v.Balloons) != 1 {
			t.Fatalf("%d memballoon elements:\n%s", len(v.Balloons), s)
		}
	}
	render(true)
	if b := v.Balloons[0]; b.Model != "virtio" || b.Reporting != "on" {
		t.Fatalf("balloon on: got %+v, want virtio with freePageReporting on", b)
	}
	render(false)
	if b := v.Balloons[0]; b.Model != "none" {
		t.Fatalf("balloon off: got %+v, want model none", b)
	}

	img := BaseImage{Name: "desktop", Hash: "0123456789abcdef0123"}
	opts := CreateOptions{MemoryMiB: 1024, VCPUs: 2, Width: 1280, Height: 800}
	with := (&Manager{cfg: Config{StateDir: "/s"}, accel: "tcg"}).templatePath(img, opts)
	without := (&Manager{cfg: Config{StateDir: "/s", NoBalloon: true}, accel: "tcg"}).templatePath(img, opts)
	if with == without {
		t.Fatalf("the same saved state %s with and without the balloon", with)
	}
	// Names before the balloon carried no version: none may match now.
	old := "/s/saved/desktop-0123456789abcdef-1024m-2c-1280x800-tcg.qcow2"
	if with == old || without == old {
		t.Fatalf("a saved state from before the balloon (%s) would be loaded", old)
	}
	if hw := fmt.Sprintf("-hw%d", hardwareVersion); !strings.Contains(with, hw+"-") || !strings.Contains(without, hw+"nb-") {
		t.Fatalf("saved states %s, %s do not name hardware version %d and the balloon's setting", with, without, hardwareVersion)
	}
}
