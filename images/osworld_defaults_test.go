package images_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOSWorldDefaultsAreNotAnswers checks that the osworld recipe's own
// settings files do not already hold the answer that one of OSWorld's
// graders looks for (the task would pass before the agent acts). Each key
// below is one a grader reads; the grader's comparison is in the comment.
func TestOSWorldDefaultsAreNotAnswers(t *testing.T) {
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("recipes", "osworld", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// VLC: the vlc_config graders (check_qt_bgcone, check_play_and_exit,
	// check_one_instance_when_started_from_file, check_qt_max_volume,
	// check_qt_minimal_view, is_vlc_recordings_folder,
	// check_global_key_play_pause) read these keys from vlcrc; VLC's own
	// defaults are not the answers, so vlcrc must leave them alone.
	vlcrc := read("vlcrc")
	for _, key := range []string{"qt-bgcone=", "play-and-exit=", "one-instance-when-started-from-file=",
		"qt-max-volume=", "qt-minimal-view=", "input-record-path=", "global-key-play-pause=", "qt-slider-colours="} {
		if strings.Contains(vlcrc, key) {
			t.Errorf("vlcrc sets %s, which an OSWorld grader reads", key)
		}
	}
	// LibreOffice: find_default_font (Writer/DefaultFont Standard),
	// check_presenter_console_disable (Impress EnablePresenterScreen
	// false) and check_auto_saving_time (AutoSaveTimeIntervall) read
	// registrymodifications.xcu.
	xcu := read("registrymodifications.xcu")
	for _, key := range []string{"Writer/DefaultFont", "EnablePresenterScreen", "AutoSaveTimeIntervall"} {
		if strings.Contains(xcu, key) {
			t.Errorf("registrymodifications.xcu sets %s, which an OSWorld grader reads", key)
		}
	}
	// os/28cc3b7e's exact_match wants the first sink's volume at 100%,
	// where a new null sink starts: the session must lower it.
	if !regexp.MustCompile(`(?m)^pactl set-sink-volume @DEFAULT_SINK@ [1-9][0-9]?%`).MatchString(read("deskfarm-session")) {
		t.Error("deskfarm-session leaves the sink at PulseAudio's 100%, the answer of OSWorld's max-volume task")
	}
	// is_utc_0 passes on a zone at +0000.
	tz := regexp.MustCompile(`(?m)^timezone=(\S+)$`).FindStringSubmatch(read("variant.sh"))
	if tz == nil || strings.Contains(tz[1], "UTC") || tz[1] == "Etc/GMT" || strings.HasPrefix(tz[1], "Europe/London") {
		t.Errorf("the image's time zone is %v, which OSWorld's is_utc_0 grader accepts", tz)
	}
	// get_default_video_player asks xdg-mime for video/*; the task wants
	// vlc.desktop.
	for _, line := range strings.Split(read("mimeapps.list"), "\n") {
		if strings.HasPrefix(line, "video/") && strings.Contains(line, "vlc") {
			t.Errorf("mimeapps.list makes VLC a default: %s", line)
		}
	}
	if !strings.Contains(read("mimeapps.list"), "video/mp4=org.gnome.Totem.desktop") {
		t.Error("mimeapps.list does not make Totem (Ubuntu's player) the default for video/mp4")
	}
}
