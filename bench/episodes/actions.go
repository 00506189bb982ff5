package main

import (
	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vocab"
)

var (
	actionsAuto = func() player.ScreenshotSize { s, _ := player.ParseScreenshotSize("auto"); return s }()
	runDefaults = player.RunOptions{}
)

func translate(input string) ([]actions.Action, error) {
	return vocab.TranslateClaude(vocab.Computer20251124, []byte(input))
}
