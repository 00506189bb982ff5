package web

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vocab"
)

// Conversions between the server's types and the wire types of package
// api. The api types are the contract; these are the only place that knows
// both sides, so a field added to vmm, pool or actions reaches the wire
// only when it is added here too.

func vmmCreateOptions(o api.CreateOptions) vmm.CreateOptions {
	return vmm.CreateOptions{Image: o.Image, MemoryMiB: o.MemoryMiB, VCPUs: o.VCPUs, Boot: o.Boot,
		Width: o.Width, Height: o.Height, Labels: o.Labels, Network: o.Network, Forwards: vmmForwards(o.Forwards)}
}

func vmmForwards(fs []api.Forward) []vmm.Forward {
	var out []vmm.Forward
	for _, f := range fs {
		out = append(out, vmm.Forward{GuestPort: f.GuestPort, HostPort: f.HostPort})
	}
	return out
}

func apiForwards(fs []vmm.Forward) []api.Forward {
	var out []api.Forward
	for _, f := range fs {
		out = append(out, api.Forward{GuestPort: f.GuestPort, HostPort: f.HostPort})
	}
	return out
}

func apiVM(vm vmm.VM) api.VM {
	return api.VM{ID: vm.ID, Domain: vm.Domain, Image: vm.Image, ImageHash: vm.ImageHash, State: string(vm.State),
		MemoryMiB: vm.MemoryMiB, VCPUs: vm.VCPUs, Width: vm.Width, Height: vm.Height, Accel: vm.Accel,
		CreatedAt: vm.CreatedAt, BootSeconds: vm.BootSeconds, Start: vm.Start, VNCSocket: vm.VNCSocket,
		Resets: vm.Resets, Labels: vm.Labels, Network: vm.Network, Forwards: apiForwards(vm.Forwards)}
}

// apiEpisode is ep on the wire, with what the server adds: the VM's live
// view and, for an osworld VM, OSWorld's address ("" for none).
func apiEpisode(ep pool.Episode, viewerURL, osworldAddress string) api.Episode {
	return api.Episode{ID: ep.ID, VM: ep.VM, Pool: ep.Pool, State: string(ep.State), Warm: ep.Warm,
		BootSeconds: ep.BootSeconds, CreatedAt: ep.CreatedAt, ExpiresAt: ep.ExpiresAt, TTLSeconds: ep.TTLSeconds,
		ScreenshotSize: ep.ScreenshotSize, CleanStart: ep.CleanStart, ResetBeforeLeaseMS: ep.ResetBeforeLeaseMS,
		EndedAt: ep.EndedAt, EndReason: ep.EndReason,
		ResetSeconds: ep.ResetSeconds, VMReplaced: ep.VMReplaced, ViewerURL: viewerURL, OSWorldAddress: osworldAddress}
}

func apiPools(ps []pool.PoolStatus) api.PoolList {
	var out api.PoolList
	if ps != nil { // [] stays [], as pool.Manager.Pools sends it
		out.Pools = make([]api.Pool, 0, len(ps))
	}
	for _, p := range ps {
		out.Pools = append(out.Pools, api.Pool{Name: p.Name, Image: p.Image, MemoryMiB: p.MemoryMiB,
			VCPUs: p.VCPUs, Width: p.Width, Height: p.Height, MinWarm: p.MinWarm, Max: p.Max,
			ScreenshotSize: p.ScreenshotSize, DefaultTTLS: float64(p.DefaultTTL), MaxTTLS: float64(p.MaxTTL),
			Network: p.Network, Forwards: slices.Clone(p.Forwards),
			Record: p.Record, RecordOptions: apiPoolRecordOptions(p.RecordOptions),
			Warm: p.Warm, Leased: p.Leased, Booting: p.Booting, Ending: p.Ending, VMs: apiPoolVMs(p.VMs),
			LastError: p.LastError, LastErrorAt: p.LastErrorAt, RetryAt: p.RetryAt})
	}
	return out
}

// apiRecordOptions is a pool's recording options on the wire.
func apiRecordOptions(o pool.RecordOptions) api.RecordOptions {
	return api.RecordOptions{A11y: o.A11y, KeepFiles: o.KeepFiles, NoVideo: o.NoVideo}
}

// apiPoolRecordOptions is a pool's record_options in GET /v1/pools:
// absent when they keep nothing more.
func apiPoolRecordOptions(o pool.RecordOptions) *api.RecordOptions {
	if o == (pool.RecordOptions{}) {
		return nil
	}
	out := apiRecordOptions(o)
	return &out
}

func apiPoolVMs(ms []pool.MemberStatus) []api.PoolVM {
	if ms == nil {
		return nil
	}
	out := make([]api.PoolVM, 0, len(ms))
	for _, m := range ms {
		out = append(out, api.PoolVM{VM: m.VM, State: m.State, Dirty: m.Dirty, Episode: m.Episode})
	}
	return out
}

func runOptions(o api.RunOptions) player.RunOptions {
	return player.RunOptions{SettleQuietMS: o.SettleQuietMS, SettleMaxMS: o.SettleMaxMS, NoSettle: o.NoSettle,
		NoGuestSettle: o.NoGuestSettle, Screenshot: player.ScreenshotPolicy(o.Screenshot), Format: player.ImageFormat(o.Format),
		JPEGQuality: o.JPEGQuality}
}

func actionsResponse(res player.Result, sw, sh int, took time.Duration) api.ActionsResponse {
	out := api.ActionsResponse{Text: res.Text, Executed: res.Executed, SettleMS: res.SettleMS,
		SettleTimedOut: res.SettleTimedOut, SettleGuestBusy: res.SettleGuestBusy, Clipboard: res.Clipboard,
		ScreenshotWidth: sw, ScreenshotHeight: sh, DurationMS: float64(took.Microseconds()) / 1000}
	if res.Image != nil {
		img := api.Image(*res.Image)
		out.Image = &img
	}
	if res.Cursor != nil {
		out.Cursor = &api.Point{X: res.Cursor.X, Y: res.Cursor.Y}
	}
	// Neutral actions are answered with the content a Claude tool_result
	// would carry, as the Claude vocabulary makes it.
	out.Content = apiContent(vocab.ClaudeToolResult("", res, nil).Content)
	return out
}

// apiContent converts the content of a Claude tool_result from the SDK's
// types (Claude's wire, which the vocabulary speaks) to api's, the one
// conversion between the two; the blocks deskfarm makes are text and base64
// images.
func apiContent(bs []anthropic.ToolResultBlockParamContentUnion) []api.ContentBlock {
	var out []api.ContentBlock
	for _, b := range bs {
		switch {
		case b.OfText != nil:
			out = append(out, api.ContentBlock{Type: "text", Text: b.OfText.Text})
		case b.OfImage != nil && b.OfImage.Source.OfBase64 != nil:
			src := b.OfImage.Source.OfBase64
			out = append(out, api.ContentBlock{Type: "image", Source: &api.ImageSource{Type: "base64",
				MediaType: string(src.MediaType), Data: src.Data}})
		}
	}
	return out
}

func replyOptions(o api.ReplyOptions) vocab.ReplyOptions {
	return vocab.ReplyOptions{ToolUseID: o.ToolUseID, ErrorsAsResults: o.ErrorsAsResults,
		AcknowledgeSafetyChecks: o.AcknowledgeSafetyChecks}
}

// callResponse is the answer to an agent's call: the neutral fields of what
// ran (as for neutral actions), and the reply in the agent's shape. The
// SDK param types are converted through their JSON, which is the shape
// both sides agree on.
func callResponse(rep vocab.Reply, sw, sh int) (api.ActionsResponse, error) {
	out := actionsResponse(rep.Result, sw, sh, 0)
	out.Terminal = rep.Terminal
	if rep.Claude != nil {
		tr, err := apiToolResult(*rep.Claude)
		if err != nil {
			return out, err
		}
		out.ToolUseID, out.IsError = tr.ToolUseID, tr.IsError
		if tr.IsError {
			out.Content = tr.Content
		}
	}
	for _, b := range rep.Toolset {
		tr, err := apiToolResult(b)
		if err != nil {
			return out, err
		}
		out.ToolResults = append(out.ToolResults, tr)
	}
	if rep.OpenAI != nil {
		var o api.ComputerCallOutput
		if err := convertJSON(rep.OpenAI, &o); err != nil {
			return out, fmt.Errorf("computer_call_output: %w", err)
		}
		out.ComputerCallOutput = &o
	}
	return out, nil
}

// apiToolResult converts a Claude tool_result block.
func apiToolResult(b anthropic.ToolResultBlockParam) (api.ToolResult, error) {
	tr := api.ToolResult{Type: "tool_result", ToolUseID: b.ToolUseID, ToolsetName: b.ToolsetName.Value,
		IsError: b.IsError.Value, Content: apiContent(b.Content)}
	if len(tr.Content) != len(b.Content) {
		return tr, fmt.Errorf("tool_result: a content block that is neither text nor a base64 image")
	}
	if tr.Content == nil {
		tr.Content = []api.ContentBlock{}
	}
	return tr, nil
}

// convertJSON converts from to to through JSON.
func convertJSON(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

// apiSnapshot is a named snapshot on the wire.
func apiSnapshot(s vmm.Snapshot) api.Snapshot {
	return api.Snapshot{Name: s.Name, CreatedAt: s.Created.UTC().Format(time.RFC3339), Bytes: s.Bytes,
		SaveMS: s.Took.Milliseconds()}
}
