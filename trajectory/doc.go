// Package trajectory owns recorded episodes (issue 16): one Recorder per
// lease (or per recording started on a VM) that keeps every step an agent
// or a person took, with the request exactly as sent, the neutral actions
// it became, the answer exactly as returned, the settle time, the cursor
// and the screenshots before and after (at the agent's size and native);
// the episode's video (package video); a person's takeover input
// coalesced into neutral actions (demo.go); the store of trajectories under
// the state dir, which outlive their episodes, with a size budget and a
// retention age that remove the oldest first; and the export in OSWorld's
// result layout (traj.jsonl, step_N_<timestamp>.png, recording.mp4,
// result.txt) with deskfarm's own complete record beside it.
//
// Writes happen on each recorder's own goroutine, off the request's path:
// a step's answer is never delayed by encoding or the disk, a full disk
// stops the recording (its info says why) and never the episode.
//
// The on-disk format is api's: deskfarm/trajectory.jsonl holds
// api.TrajectoryStep lines, deskfarm/info.json an api.TrajectoryInfo.
package trajectory
