package main

import (
	"errors"
	"log/slog"

	"github.com/deskfarm/deskfarm/ksm"
)

// startKSM turns the host's same-page merging on with ksm.Farm's settings
// for the life of the farm (openFarm), unless --ksm=false, and returns what puts the
// host's previous settings back. Where the host does not allow it (not
// root, no KSM, a read-only /sys) the farm runs without it.
func startKSM(on bool, log *slog.Logger) (restore func()) {
	if !on {
		log.Info("ksm left as the host has it (--ksm=false)", "op", "ksm")
		return func() {}
	}
	host := ksm.Host{}
	e, err := host.Enable(ksm.Farm)
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, ksm.ErrUnavailable) {
			level = slog.LevelInfo
		}
		log.Log(nil, level, "ksm not enabled: guests' identical pages are not merged", "op", "ksm", "err", err)
		return func() {}
	}
	args := []any{"op", "ksm", "dir", ksm.DefaultDir}
	for f, v := range e.Set {
		args = append(args, f, v)
	}
	log.Info("ksm on: merging identical guest pages", args...)
	return func() {
		if err := e.Restore(); err != nil {
			log.Warn("ksm: could not restore the host's settings", "op", "ksm", "err", err)
			return
		}
		log.Info("ksm: host settings restored", "op", "ksm")
	}
}
