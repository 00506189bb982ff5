package vmm

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"sort"
	"strings"
	"text/template"
)

// metadataNS is the XML namespace of deskfarm's domain metadata; metadataKey
// its prefix. A restarted deskfarm finds its VMs by this element.
const (
	metadataNS  = "https://github.com/deskfarm/deskfarm/xmlns/vm/1"
	metadataKey = "deskfarm"
	// DomainPrefix starts the libvirt name of every deskfarm domain.
	DomainPrefix = "deskfarm-"
)

// metadata is what deskfarm records on each domain: the VM's spec and the
// state a restarted deskfarm needs.
type metadata struct {
	XMLName xml.Name `xml:"vm"`
	machineSpec
	State       State   `xml:"state"`
	BootSeconds float64 `xml:"boot-seconds"`
	Labels      []label `xml:"label,omitempty"`
}

// label is one VM label in the metadata: <label key="pool">desktop</label>.
type label struct {
	Key   string `xml:"key,attr"`
	Value string `xml:",chardata"`
}

func labelMap(ls []label) map[string]string {
	if len(ls) == 0 {
		return nil
	}
	out := make(map[string]string, len(ls))
	for _, l := range ls {
		out[l.Key] = l.Value
	}
	return out
}

// labelList is the labels of m as a VM keeps them (setLabel's form: keys
// sorted, empty values left out).
func labelList(m map[string]string) []label {
	var ls []label
	for k, v := range m {
		ls = setLabel(ls, k, v)
	}
	return ls
}

// setLabel returns ls with key set or, with an empty value, removed, keys
// sorted; ls itself is not changed.
func setLabel(ls []label, key, value string) []label {
	out := make([]label, 0, len(ls)+1)
	for _, l := range ls {
		if l.Key != key {
			out = append(out, l)
		}
	}
	if value != "" {
		out = append(out, label{Key: key, Value: value})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if len(out) == 0 {
		return nil
	}
	return out
}

// marshal renders the metadata element with deskfarm's namespace, as
// DomainSetMetadata wants it (libvirt re-prefixes it with metadataKey).
func (m metadata) marshal() (string, error) {
	b, err := xml.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("marshal metadata of vm %s: %w", m.ID, err)
	}
	return strings.Replace(string(b), "<vm>", `<vm xmlns="`+metadataNS+`">`, 1), nil
}

// parseMetadata reads the element DomainGetMetadata returns.
func parseMetadata(s string) (metadata, error) {
	var m metadata
	if err := xml.Unmarshal([]byte(s), &m); err != nil {
		return m, fmt.Errorf("parse deskfarm metadata: %w", err)
	}
	if m.ID == "" {
		return m, fmt.Errorf("parse deskfarm metadata: no id in %q", s)
	}
	m.XMLName = xml.Name{}
	return m, nil
}

// domainSpec is everything the domain XML depends on.
type domainSpec struct {
	Name        string
	Meta        metadata
	Accel       string // "kvm" or "tcg"
	MemoryMiB   int
	VCPUs       int
	Kernel      string
	Initrd      string
	Cmdline     string
	Overlay     string
	VNCSocket   string
	SessionSock string
	// A11ySock is the host's end of the accessibility port (DialA11y).
	A11ySock   string
	ConsoleLog string
	Emulator   string
	// Security is the host's sVirt model ("apparmor" or "selinux"), or ""
	// when the host has none.
	Security string
	// Network is NetworkNone or NetworkUser; Forwards go with the latter.
	Network  string
	Forwards []Forward
	// Balloon gives the guest a virtio-balloon device with free page
	// reporting (Config.NoBalloon turns it off).
	Balloon bool
}

// netdevArg is the -netdev argument of a user-mode network: slirp, with each
// forward bound to the host's loopback only.
func (s domainSpec) netdevArg() string {
	var b strings.Builder
	b.WriteString("user,id=deskfarm-net0")
	if s.Network != NetworkUser {
		// Forwards without network: the guest's packets to anywhere but
		// the forwards' connections are dropped by QEMU's slirp.
		b.WriteString(",restrict=on")
	}
	for _, f := range s.Forwards {
		fmt.Fprintf(&b, ",hostfwd=tcp:127.0.0.1:%d-:%d", f.HostPort, f.GuestPort)
	}
	return b.String()
}

var domainTmpl = template.Must(template.New("domain").Funcs(template.FuncMap{"x": xmlEscape}).Parse(`<domain type='{{if eq .Accel "kvm"}}kvm{{else}}qemu{{end}}' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{{x .Name}}</name>
  <title>deskfarm {{x .Meta.Image}} VM {{x .Meta.ID}}</title>
  <metadata>{{.MetaXML}}</metadata>
  <memory unit='MiB'>{{.MemoryMiB}}</memory>
  <vcpu>{{.VCPUs}}</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{{x .Kernel}}</kernel>
    <initrd>{{x .Initrd}}</initrd>
    <cmdline>{{x .Cmdline}}</cmdline>
  </os>
  <features><acpi/></features>
  {{if eq .Accel "kvm"}}<cpu mode='host-passthrough'/>{{end}}
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>{{x .Emulator}}</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='unsafe' discard='unmap'/>
      <source file='{{x .Overlay}}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <controller type='usb' model='none'/>
    <input type='tablet' bus='virtio'/>
    <input type='keyboard' bus='ps2'/>
    <graphics type='vnc'>
      <listen type='socket' socket='{{x .VNCSocket}}'/>
    </graphics>
    <video><model type='vga' vram='16384' heads='1' primary='yes'/></video>
    <channel type='unix'>
      <target type='virtio' name='org.qemu.guest_agent.0'/>
    </channel>
    <channel type='unix'>
      <source mode='bind' path='{{x .SessionSock}}'/>
      <target type='virtio' name='org.deskfarm.session.0'/>
    </channel>
    <channel type='unix'>
      <source mode='bind' path='{{x .A11ySock}}'/>
      <target type='virtio' name='org.deskfarm.a11y.0'/>
    </channel>
    <serial type='file'>
      <source path='{{x .ConsoleLog}}'/>
      <target port='0'/>
    </serial>
    {{- if .Balloon}}
    <memballoon model='virtio' freePageReporting='on'/>
    {{- else}}
    <memballoon model='none'/>
    {{- end}}
  </devices>
  {{- if .Security}}
  <seclabel type='dynamic' model='{{x .Security}}' relabel='yes'/>
  <seclabel type='none' model='dac'/>
  {{- else}}
  <seclabel type='none'/>
  {{- end}}
  {{- if .NIC}}
  <qemu:commandline>
    <qemu:arg value='-netdev'/>
    <qemu:arg value='{{x .NetdevArg}}'/>
    <qemu:arg value='-device'/>
    <qemu:arg value='virtio-net-pci,netdev=deskfarm-net0,bus=pci.0,addr=0x1f'/>
  </qemu:commandline>
  {{- end}}
</domain>
`))

// domainXML renders the libvirt definition.
//
// Security: where the host has AppArmor or SELinux, libvirt's sVirt gives
// each QEMU its own dynamic label (a profile or MCS category), so one
// escaped QEMU cannot touch another VM's files. libvirt's DAC relabelling
// stays off in every case: deskfarm gives the VM directory to libvirt-qemu
// itself and keeps the shared base read-only, and chown-ing a backing file
// used by many VMs at once (and back on each VM's exit) only races. On a
// host without either, seclabel is none and QEMU is confined by its user
// and the file modes alone.
//
// Network: none by default, the guest sees no NIC; none with forwards gets
// a NIC on a restricted user-mode stack (restrict=on: only the forwards'
// connections pass, the guest reaches neither the host nor beyond). User
// mode is QEMU's
// slirp passed as extra arguments: libvirt 9.0's own <interface
// type='user'> cannot forward ports without passt, which Debian 12 lacks.
// The NIC gets the last PCI slot of the pc machine's bus, 0x1f: libvirt
// gives its own devices slots from 0x2 up, and QEMU would otherwise put
// the NIC on the first free slot before libvirt's VGA claims slot 2 (seen
// with QEMU 7.2: "PCI: slot 2 function 0 not available for VGA"). libvirt
// marks the domain "tainted: custom-argv" in its log.
//
// Memory: the balloon is never inflated; it is there for free page
// reporting (QEMU's free-page-reporting=on, libvirt >= 6.9, QEMU >= 5.1,
// the guest's virtio_balloon with CONFIG_PAGE_REPORTING, which Debian's
// kernel has): the guest tells QEMU which free blocks of 2 MiB and up it
// has, and QEMU drops them from its RSS (MADV_DONTNEED), so memory a guest
// used and freed goes back to the host. Guest RAM stays mergeable by KSM
// (QEMU's mem-merge, on by default; package ksm turns ksmd on).
func domainXML(s domainSpec) (string, error) {
	meta, err := s.Meta.marshal()
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	err = domainTmpl.Execute(&b, struct {
		domainSpec
		MetaXML   string
		NetdevArg string
		NIC       bool
	}{s, meta, s.netdevArg(), hasNIC(s.Network, s.Forwards)})
	if err != nil {
		return "", fmt.Errorf("render domain xml for %s: %w", s.Name, err)
	}
	return b.String(), nil
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return strings.ReplaceAll(b.String(), "'", "&#39;")
}
