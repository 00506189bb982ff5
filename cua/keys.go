package cua

import (
	"fmt"

	"github.com/deskfarm/deskfarm/actions"
)

// keyAliases are key names Cua's clients send that actions.ParseKey does not
// know: pynput Key attribute names (Cua's Linux server looks names up as
// pynput.keyboard.Key attributes) whose spelling differs from X's and from
// the aliases actions already takes. Cua's own Key enum values (enter, esc,
// pagedown, del, win, cmd, option, ...) are actions aliases already.
var keyAliases = map[string]string{
	"cmd_l":             "Super_L",
	"cmd_r":             "Super_R",
	"alt_gr":            "Alt_R",
	"media_play_pause":  "XF86AudioPlay",
	"media_volume_mute": "XF86AudioMute",
	"media_volume_down": "XF86AudioLowerVolume",
	"media_volume_up":   "XF86AudioRaiseVolume",
	"media_previous":    "XF86AudioPrev",
	"media_next":        "XF86AudioNext",
	"return":            "Return",
	"page_up":           "Page_Up",
	"page_down":         "Page_Down",
	"print_screen":      "Print",
	"caps_lock":         "Caps_Lock",
	"num_lock":          "Num_Lock",
	"scroll_lock":       "Scroll_Lock",
}

// parseKey resolves one of Cua's key names; an unknown one is worded as
// Cua's server words it.
func parseKey(name string) (actions.Key, error) {
	if x, ok := keyAliases[name]; ok {
		name = x
	}
	k, err := actions.ParseKey(name)
	if err != nil {
		return actions.Key{}, fmt.Errorf("Unknown key: %s", name)
	}
	return k, nil
}
