package main

import "github.com/deskfarm/deskfarm/actions"

var (
	actionsAuto = func() actions.ScreenshotSize { s, _ := actions.ParseScreenshotSize("auto"); return s }()
	runDefaults = actions.RunOptions{}
)

func translate(input string) ([]actions.Action, error) {
	return actions.TranslateClaude(actions.Computer20251124, []byte(input))
}
