// Package vmm owns deskfarm's virtual machines: qcow2 overlays on read-only
// base images, libvirt domains, the QEMU guest agent, the session readiness
// channel and the ready snapshot that resets return to.
//
// It talks to libvirtd through go-libvirt over the local unix socket; nothing
// here shells out to virsh.
package vmm
