// Package actions owns deskfarm's neutral action model (move, click, drag,
// scroll, keys, typing, wait, screenshot, zoom, cursor position), the
// translators from agent vocabularies onto it (Claude's computer-use tool in
// every version), key names, screenshot scaling and zoom, and the executor
// that plays actions onto a Display.
package actions
