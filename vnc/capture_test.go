package vnc

// Files of the QEMU capture under testdata/; see testdata/README.md.
const (
	captureStream = "qemu-7.2-tiny-1280x800.rfb.gz"
	captureScreen = "qemu-7.2-tiny-1280x800.png"
)
