package vmm

// The mandatory access control libvirt offers (sVirt), which confines each
// VM's QEMU on hosts that have it (see domainXML).

import (
	"encoding/xml"
)

// macModel returns the mandatory access control model libvirt offers for
// sVirt ("apparmor" or "selinux") from its capabilities XML, or "".
func macModel(capsXML string) string {
	var caps struct {
		Host struct {
			SecModels []struct {
				Model string `xml:"model"`
			} `xml:"secmodel"`
		} `xml:"host"`
	}
	if err := xml.Unmarshal([]byte(capsXML), &caps); err != nil {
		return ""
	}
	for _, s := range caps.Host.SecModels {
		if s.Model == "apparmor" || s.Model == "selinux" {
			return s.Model
		}
	}
	return ""
}
