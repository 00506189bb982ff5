package mcpserver

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/deskfarm/deskfarm/api"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Named snapshots and forks (issue 17): snapshot, revert_snapshot and
// fork_episode.

// SnapshotArgs are the snapshot and revert_snapshot tools' arguments.
type SnapshotArgs struct {
	Name string `json:"name" jsonschema:"the snapshot's name: 1-64 of letters, digits, _ . -, starting with a letter or digit"`
	Target
}

// ForkArgs are the fork_episode tool's arguments.
type ForkArgs struct {
	Episode string  `json:"episode,omitempty" jsonschema:"episode id to fork; default: the episode start_episode last started in this session"`
	Count   int     `json:"count" jsonschema:"how many new episodes"`
	TTLS    float64 `json:"ttl_s,omitempty" jsonschema:"each new episode's lease in seconds (default: the pool's)"`
}

func (s *Server) addSnapshotTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "snapshot",
		Description: "Save the VM's memory and disk as a named snapshot, in place: the VM keeps running. revert_snapshot returns to it; an episode's snapshots are removed when it ends."},
		s.snapshot)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "revert_snapshot",
		Description: "Return the VM in place to a named snapshot taken with the snapshot tool: its screen, programs and files as they were then."},
		s.revertSnapshot)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "fork_episode",
		Description: "Start count new episodes, each on a desktop that starts from the episode's state now (memory and disk); the episode goes on. " +
			"The new episodes end with this session; name one in the other tools' episode argument to act on it."},
		s.forkEpisode)
}

func (s *Server) snapshot(ctx context.Context, req *mcp.CallToolRequest, in SnapshotArgs) (*mcp.CallToolResult, any, error) {
	t, err := s.target(req.Session, in.Target)
	if err != nil {
		return nil, nil, err
	}
	if in.Name == "" {
		return nil, nil, &ArgError{"name", "required: name the snapshot"}
	}
	snap, err := s.c.SaveSnapshot(ctx, t, in.Name)
	if err != nil {
		return nil, nil, apiFailure("snapshot", err)
	}
	return textResult(fmt.Sprintf("Snapshot %s of %s saved in %d ms (%d MiB of memory state).", snap.Name, t, snap.SaveMS, snap.Bytes>>20)), snap, nil
}

func (s *Server) revertSnapshot(ctx context.Context, req *mcp.CallToolRequest, in SnapshotArgs) (*mcp.CallToolResult, any, error) {
	t, err := s.target(req.Session, in.Target)
	if err != nil {
		return nil, nil, err
	}
	if in.Name == "" {
		return nil, nil, &ArgError{"name", "required: name the snapshot to revert to"}
	}
	res, err := s.c.RevertSnapshot(ctx, t, in.Name)
	if err != nil {
		return nil, nil, apiFailure("revert_snapshot", err)
	}
	return textResult(fmt.Sprintf("%s reverted to snapshot %s in %d ms; take a screenshot to see it.", t, res.Snapshot, res.RevertMS)), res, nil
}

func (s *Server) forkEpisode(ctx context.Context, req *mcp.CallToolRequest, in ForkArgs) (*mcp.CallToolResult, any, error) {
	id := in.Episode
	if id == "" {
		if id = s.current(req.Session); id == "" {
			return nil, nil, &ArgError{"episode", "no episode in this session to fork: call start_episode first, or name one"}
		}
	}
	if in.Count < 1 || in.Count > api.MaxFork {
		return nil, nil, &ArgError{"count", fmt.Sprintf("must be in [1, %d], got %d", api.MaxFork, in.Count)}
	}
	if in.TTLS < 0 {
		return nil, nil, &ArgError{"ttl_s", fmt.Sprintf("must be positive, got %g", in.TTLS)}
	}
	res, err := s.c.Fork(ctx, id, in.Count, in.TTLS)
	if err != nil {
		return nil, nil, apiFailure("fork_episode", err)
	}
	ids := make([]string, len(res.Episodes))
	for i, ep := range res.Episodes {
		ids[i] = ep.ID
	}
	s.noteForks(req.Session, id, ids)
	s.log.Info("episode forked", "op", "mcp_fork_episode", "episode", id, "count", len(ids))
	text := fmt.Sprintf("Episode %s forked into %d new episodes in %d ms: %s.\nThe other tools still act on %s unless given an episode.",
		id, len(ids), res.ForkMS, strings.Join(ids, ", "), id)
	return textResult(text), res, nil
}

// noteForks records the episodes a fork of source started in ss (they end
// with it), keeping the session's default where it was.
func (s *Server) noteForks(ss *mcp.ServerSession, source string, ids []string) {
	def := s.current(ss)
	for _, id := range ids {
		s.noteEpisode(ss, id)
	}
	if def == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss]; ok {
		st.episodes = append(slices.DeleteFunc(st.episodes, func(e string) bool { return e == def }), def)
	}
}
