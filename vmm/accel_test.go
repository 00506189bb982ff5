package vmm

import (
	"errors"
	"testing"
)

func TestChooseAccel(t *testing.T) {
	ok := func() error { return nil }
	missing := func() error { return errors.New("open /dev/kvm: no such file or directory") }
	const withVMX = "processor\t: 0\nflags\t\t: fpu vme de pse vmx sse\n"
	const without = "processor\t: 0\nflags\t\t: fpu vme de pse sse hypervisor\n"
	cases := []struct {
		want, cpuinfo string
		kvm           func() error
		accel         string
		fails         bool
	}{
		{"auto", withVMX, ok, AccelKVM, false},
		{"auto", without, ok, AccelTCG, false}, // paravirtual nested KVM
		{"auto", withVMX, missing, AccelTCG, false},
		{"", withVMX, ok, AccelKVM, false},
		{"tcg", withVMX, ok, AccelTCG, false},
		{"kvm", without, ok, AccelKVM, false},
		{"kvm", withVMX, missing, "", true},
		{"hvf", withVMX, ok, "", true},
	}
	for _, c := range cases {
		got, reason, err := chooseAccel(c.want, c.cpuinfo, c.kvm)
		if (err != nil) != c.fails || got != c.accel {
			t.Errorf("chooseAccel(%q): got %q (%s) err %v; want %q fails=%v", c.want, got, reason, err, c.accel, c.fails)
		}
		if err == nil && reason == "" {
			t.Errorf("chooseAccel(%q): no reason", c.want)
		}
	}
}
