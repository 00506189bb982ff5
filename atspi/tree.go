package atspi

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Node is one accessible object as the walk saw it: the facts every shape
// is rendered from.
type Node struct {
	// Role is libatspi's role name ("push button"); the XML tag is it with
	// '-' for ' '.
	Role   string
	Name   string
	States []string // state names, in AT-SPI's order ("visible", "has_popup")
	// Attrs are the XML attributes after name and the st: ones, in order:
	// attr:, cp:, image and selection, val:, act:.
	Attrs []Attr
	// Box is the screen box (x, y, width, height) of a node both visible
	// and showing, nil otherwise.
	Box      *[4]int32
	Text     string
	Children []*Node
}

// Attr is one XML attribute of a node.
type Attr struct{ Key, Value string }

// namespaces are the XML prefixes of OSWorld's tree (desktop_env/server
// main.py's _accessibility_ns_map_ubuntu), declared on the root.
var namespaces = [...][2]string{
	{"st", "https://accessibility.ubuntu.example.org/ns/state"},
	{"attr", "https://accessibility.ubuntu.example.org/ns/attributes"},
	{"cp", "https://accessibility.ubuntu.example.org/ns/component"},
	{"doc", "https://accessibility.ubuntu.example.org/ns/document"},
	{"docattr", "https://accessibility.ubuntu.example.org/ns/document/attributes"},
	{"txt", "https://accessibility.ubuntu.example.org/ns/text"},
	{"val", "https://accessibility.ubuntu.example.org/ns/value"},
	{"act", "https://accessibility.ubuntu.example.org/ns/action"},
}

// has reports whether n has state s.
// attr is n's attribute key's value, "" when it has none.
func (n *Node) attr(key string) string {
	for _, a := range n.Attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return ""
}

func (n *Node) has(s string) bool {
	for _, x := range n.States {
		if x == s {
			return true
		}
	}
	return false
}

// tag is n's XML element name.
func (n *Node) tag() string {
	if n.Role == "" {
		return "unknown"
	}
	return strings.ReplaceAll(n.Role, " ", "-")
}

// XML renders root as OSWorld's accessibility tree: one element per node
// named by its role, the namespaced attributes, the node's text as content.
func XML(root *Node) []byte {
	var b strings.Builder
	writeXML(&b, root, true)
	return []byte(b.String())
}

func writeXML(b *strings.Builder, n *Node, root bool) {
	tag := n.tag()
	b.WriteString("<" + tag)
	if root {
		for _, ns := range namespaces {
			fmt.Fprintf(b, ` xmlns:%s="%s"`, ns[0], ns[1])
		}
	} else {
		// The root (desktop-frame) has no attributes of its own.
		attr(b, "name", n.Name)
		for _, s := range n.States {
			attr(b, "st:"+s, "true")
		}
	}
	for _, a := range n.Attrs {
		attr(b, a.Key, a.Value)
	}
	if n.Text == "" && len(n.Children) == 0 {
		b.WriteString("/>")
		return
	}
	b.WriteString(">")
	b.WriteString(escText(n.Text))
	for _, c := range n.Children {
		writeXML(b, c, false)
	}
	b.WriteString("</" + tag + ">")
}

func attr(b *strings.Builder, k, v string) {
	b.WriteString(" " + k + `="`)
	v = escText(v)
	v = strings.NewReplacer(`"`, "&quot;", "\t", "&#9;", "\n", "&#10;", "\r", "&#13;").Replace(v)
	b.WriteString(v + `"`)
}

// clean drops what XML 1.0 cannot carry: control characters but tab and
// newlines, lone surrogates (invalid UTF-8 here), U+FFFE and U+FFFF.
func clean(s string) string {
	ok := true
	for _, r := range s {
		if !xmlChar(r) {
			ok = false
			break
		}
	}
	if ok && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r != utf8.RuneError && xmlChar(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func xmlChar(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return true
	case r < 0x20, r == 0xFFFE, r == 0xFFFF:
		return false
	}
	return true
}

func escText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(clean(s))
}

// cuaNode is Cua's node shape (computer-server's handlers/linux.py).
type cuaNode struct {
	Role     string     `json:"role"`
	Title    string     `json:"title"`
	Position *cuaPoint  `json:"position,omitempty"`
	Size     *cuaSize   `json:"size,omitempty"`
	Value    string     `json:"value,omitempty"`
	States   []string   `json:"states,omitempty"`
	Children []*cuaNode `json:"children"`
}

type cuaPoint struct {
	X int32 `json:"x"`
	Y int32 `json:"y"`
}

type cuaSize struct {
	Width  int32 `json:"width"`
	Height int32 `json:"height"`
}

// CuaJSON renders root as Cua's accessibility tree: each node {"role",
// "title", "children"}, with "position" and "size" when on screen, "value"
// (its text) and "states".
func CuaJSON(root *Node) []byte {
	var conv func(n *Node) *cuaNode
	conv = func(n *Node) *cuaNode {
		c := &cuaNode{Role: n.Role, Title: n.Name, Value: clean(n.Text), States: n.States, Children: []*cuaNode{}}
		if n.Box != nil {
			c.Position = &cuaPoint{n.Box[0], n.Box[1]}
			c.Size = &cuaSize{n.Box[2], n.Box[3]}
		}
		for _, ch := range n.Children {
			c.Children = append(c.Children, conv(ch))
		}
		return c
	}
	b, _ := json.Marshal(conv(root)) // only strings and numbers: cannot fail
	return b
}

// TerminalJSON is OSWorld's /terminal answer: {"output": text or null}.
func TerminalJSON(text *string) []byte {
	b, _ := json.Marshal(struct {
		Output *string `json:"output"`
	}{text})
	return b
}

// focusedTerminal finds the text of the focused terminal of
// gnome-terminal's active window, as OSWorld's get_terminal_output: the
// first gnome-terminal-server application, its active frames, and exactly
// one focused terminal among them; nil otherwise.
func focusedTerminal(root *Node) *Node {
	for _, app := range root.Children {
		if app.Role != "application" || app.Name != "gnome-terminal-server" {
			continue
		}
		var found []*Node
		for _, fr := range app.Children {
			if fr.Role == "frame" && fr.has("active") {
				found = appendFocusedTerminals(found, fr)
			}
		}
		if len(found) == 1 {
			return found[0]
		}
		return nil
	}
	return nil
}

func appendFocusedTerminals(found []*Node, n *Node) []*Node {
	if n.Role == "terminal" && n.has("focused") {
		found = append(found, n)
	}
	for _, c := range n.Children {
		found = appendFocusedTerminals(found, c)
	}
	return found
}
