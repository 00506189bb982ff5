// Package vocab owns the agent vocabularies: it translates each agent's
// request onto the neutral action model (package actions) and answers in the
// agent's own shape, with errors in the agent's field names. It is the only
// package besides agentloop that imports the AI SDKs (anthropic-sdk-go,
// openai-go), for their wire types; the desk and the player play the model
// without them.
//
//   - call.go: Decode(tool, input), the one entry over every vocabulary,
//     and Call.Run, which plays a call on a player.Runner and answers in
//     the call's own shape.
//   - claude.go, toolset.go: Claude's computer tool in every version and
//     its computer_toolset_20260801 (tool_result blocks as anthropic-sdk-go
//     types).
//   - openai.go: OpenAI computer_call items and their computer_call_output
//     (openai-go types).
//   - osworld.go, pyautogui.go, pyautogui_lex.go: OSWorld's computer_13 and
//     its pyautogui code (a small parser for literal calls; anything else is
//     ErrNotHostPlayable, for the caller to run in the guest).
//
// Each vocabulary parses its input once into the model's types; errors are
// *actions.FieldError naming the agent's own fields.
package vocab
