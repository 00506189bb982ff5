package actions

import (
	"encoding/json"
	"errors"
)

// ErrNotHostPlayable means pyautogui code holds something other than literal
// pyautogui calls, time.sleep, imports and comments: the caller runs it in
// the guest instead.
var ErrNotHostPlayable = errors.New("code is not host-playable")

// pyautoguiCode reads the pyautogui tool's input: a JSON string of code, or
// {"command": code}.
func pyautoguiCode(input json.RawMessage) (string, error) {
	var code string
	if err := json.Unmarshal(input, &code); err == nil {
		return code, nil
	}
	var obj struct {
		Command *string `json:"command"`
	}
	if err := json.Unmarshal(input, &obj); err != nil || obj.Command == nil {
		return "", fieldErr("input", nil, `must be a JSON string of Python code, or {"command": code}`)
	}
	return *obj.Command, nil
}

// TranslatePyautogui is filled in by the pyautogui parser.
func TranslatePyautogui(code string) ([]Action, error) {
	return nil, ErrNotHostPlayable
}
