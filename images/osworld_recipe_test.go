package images

import (
	"bytes"
	"io/fs"
	"path"
	"testing"
)

// osworldFromDesktop are the osworld recipe's files that are copies of the
// desktop recipe's: a recipe's hash covers only its own directory, so the
// osworld recipe carries its own copies rather than reading desktop's.
var osworldFromDesktop = []string{
	"99-deskfarm.rules", "autologin.conf", "bash_profile", "deskfarm-autostart",
	"deskfarm-guestd", "deskfarm-guestd.service", "deskfarm-screen", "desktop-items-0.conf",
	"dpkg-nodoc", "initramfs-hook", "initramfs-no-udev", "initramfs.conf", "journald.conf",
	"modprobe-blacklist.conf", "pcmanfm.conf", "systemd.conf", "xinitrc", "xorg.conf",
}

// TestOSWorldCopiesMatchDesktop keeps the copies identical, so a fix to the
// desktop image's boot, guest daemon or session plumbing reaches the osworld
// image too (and changes its hash, so it is rebuilt).
func TestOSWorldCopiesMatchDesktop(t *testing.T) {
	fsys := embeddedRecipes()
	for _, f := range osworldFromDesktop {
		want, err := fs.ReadFile(fsys, path.Join("desktop", f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs.ReadFile(fsys, path.Join("osworld", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("recipes/osworld/%s differs from recipes/desktop/%s: copy it over", f, f)
		}
	}
}
