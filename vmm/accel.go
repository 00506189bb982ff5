package vmm

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Accelerator choices for Config.Accel.
const (
	AccelAuto = "auto"
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// chooseAccel picks the accelerator and says why. /dev/kvm alone is not
// enough: these hosts expose a paravirtual nested KVM without vmx/svm on
// which a stock Debian kernel hangs under -accel kvm, so auto also requires
// the CPU flags.
func chooseAccel(want string, cpuinfo string, kvmUsable func() error) (accel, reason string, err error) {
	switch want {
	case AccelKVM:
		if err := kvmUsable(); err != nil {
			return "", "", fmt.Errorf("accel kvm forced but /dev/kvm is unusable: %w", err)
		}
		return AccelKVM, "forced by config", nil
	case AccelTCG:
		return AccelTCG, "forced by config", nil
	case AccelAuto, "":
	default:
		return "", "", fmt.Errorf("accel %q: %w: accepted values are auto, kvm, tcg", want, ErrInvalid)
	}
	if err := kvmUsable(); err != nil {
		return AccelTCG, "no usable /dev/kvm (" + err.Error() + ")", nil
	}
	if !hasVirtFlags(cpuinfo) {
		return AccelTCG, "/dev/kvm present but the CPU shows no vmx/svm flag (paravirtual nested KVM hangs stock kernels)", nil
	}
	return AccelKVM, "/dev/kvm usable and CPU has hardware virtualisation", nil
}

// hasVirtFlags reports whether /proc/cpuinfo lists vmx or svm.
func hasVirtFlags(cpuinfo string) bool {
	sc := bufio.NewScanner(strings.NewReader(cpuinfo))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if f == "vmx" || f == "svm" {
				return true
			}
		}
	}
	return false
}

func kvmDeviceUsable() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

func detectAccel(want string) (string, string, error) {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	return chooseAccel(want, string(cpuinfo), kvmDeviceUsable)
}
