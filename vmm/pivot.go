package vmm

// Disk pivots: a running (or paused) QEMU moves its disk onto another
// qcow2 file without a restart. A fork uses it to start its new VMs' QEMUs
// before the source's state exists: each starts paused on a placeholder
// disk, and once the fork template is copied, the disk is pivoted onto the
// copy and the transfer snapshot loaded (fork.go).
//
// How, on QEMU 7.2 through libvirt 9.0 (tried by hand and then in
// TestE2EForkPivot): blockdev-add the new file as a qcow2 node on the same
// backing node, a blockdev-mirror with sync "none" from the disk's node to
// it (nothing to copy: the guest is paused), job-complete, which puts the
// new node under the guest's disk, then blockdev-del of the old nodes, so
// that savevm and loadvm, which go over every root node that is writable
// (QEMU's bdrv_all_snapshots_includes_bs), no longer see the placeholder.
// The whole pivot took about 0.1 s by hand. libvirt keeps its own node
// names in its status XML; it does not use them for what deskfarm asks of it
// (block stats, a libvirtd restart's reconnect: both tried after a pivot).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// QMPError is an error QEMU answered a QMP command with.
type QMPError struct {
	Command string
	Class   string // QEMU's error class, e.g. GenericError
	Desc    string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qemu: %s: %s (%s)", e.Command, e.Desc, e.Class)
}

// parseQMPReply reads one QMP reply as libvirt's qemu-monitor-command
// passes it on: {"return": ...} or {"error": {"class", "desc"}}
// (testdata/captures.json qmp-*). into, when not nil, receives the return
// value.
func parseQMPReply(command, reply string, into any) error {
	var r struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(reply), &r); err != nil {
		return fmt.Errorf("qemu: %s: reply %.200q is not QMP: %w", command, reply, err)
	}
	if r.Error != nil {
		return &QMPError{Command: command, Class: r.Error.Class, Desc: r.Error.Desc}
	}
	if r.Return == nil {
		return fmt.Errorf("qemu: %s: reply %.200q has neither return nor error", command, reply)
	}
	if into == nil {
		return nil
	}
	if err := json.Unmarshal(r.Return, into); err != nil {
		return fmt.Errorf("qemu: %s: return value %.200q: %w", command, r.Return, err)
	}
	return nil
}

// qmp runs one QMP command with arguments (nil for none) and decodes its
// return value into into (nil to drop it).
func (m *monitor) qmp(ctx context.Context, command string, args, into any) error {
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	out, err := m.hv.monitorQMP(ctx, m.dom, string(b))
	if err != nil {
		return fmt.Errorf("monitor %s on vm %s: %w", command, m.vm, err)
	}
	if err := parseQMPReply(command, out, into); err != nil {
		return fmt.Errorf("monitor on vm %s: %w", m.vm, err)
	}
	return nil
}

// blockNode is one entry of query-named-block-nodes.
type blockNode struct {
	Name     string `json:"node-name"`
	Driver   string `json:"drv"`
	File     string `json:"file"`
	ReadOnly bool   `json:"ro"`
}

// blockDevice is one entry of query-block: a guest device and the node
// under it.
type blockDevice struct {
	QDev     string `json:"qdev"`
	Inserted *struct {
		Node string `json:"node-name"`
		File string `json:"file"`
	} `json:"inserted"`
}

// blockJob is one entry of query-jobs.
type blockJob struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Status string `json:"status"`
	Error  string `json:"error"`
}

// pivotPlan names the nodes a pivot of the disk on file replaces and
// keeps: the disk's format node and its file node, and the base's format
// node the new one backs onto.
type pivotPlan struct {
	format, storage, base string
}

// planPivot finds, in QEMU's answers, the nodes of the guest disk whose
// file is file and whose backing file is base: the format node under the
// device, its file node (the one protocol node on file), and base's format
// node (read-only qcow2 on base).
func planPivot(devs []blockDevice, nodes []blockNode, file, base string) (pivotPlan, error) {
	var p pivotPlan
	for _, d := range devs {
		if d.Inserted != nil && d.Inserted.File == file {
			if p.format != "" {
				return p, fmt.Errorf("two guest disks on %s", file)
			}
			p.format = d.Inserted.Node
		}
	}
	for _, n := range nodes {
		switch {
		case n.Driver == "file" && n.File == file:
			if p.storage != "" {
				return p, fmt.Errorf("two file nodes on %s (%s, %s)", file, p.storage, n.Name)
			}
			p.storage = n.Name
		case n.Driver == "qcow2" && n.File == base && n.ReadOnly && p.base == "":
			p.base = n.Name
		}
	}
	switch {
	case p.format == "":
		return p, fmt.Errorf("no guest disk on %s", file)
	case p.storage == "":
		return p, fmt.Errorf("no file node on %s", file)
	case p.base == "":
		return p, fmt.Errorf("no read-only qcow2 node on the base %s", base)
	}
	return p, nil
}

// pivotSeq numbers pivot nodes and jobs within the process: node names
// must be unique in one QEMU, and a QEMU pivots at most once per fork.
var pivotSeq atomic.Uint64

// pivotJobPoll is how often a pivot asks QEMU for its mirror job's state;
// with the guest paused the job is ready and done within a few polls.
const pivotJobPoll = 5 * time.Millisecond

// pivotDisk puts the qcow2 at path (a file the guest's disk, opened from
// the same path, does not hold: the caller renamed the old one away) under
// the guest's disk, backed by the base image's node, and closes the old
// disk's nodes. The guest must be paused.
func (m *monitor) pivotDisk(ctx context.Context, path, base string) error {
	var devs []blockDevice
	var nodes []blockNode
	if err := m.qmp(ctx, "query-block", nil, &devs); err != nil {
		return err
	}
	if err := m.qmp(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &nodes); err != nil {
		return err
	}
	p, err := planPivot(devs, nodes, path, base)
	if err != nil {
		return fmt.Errorf("pivot disk of vm %s: %w", m.vm, err)
	}
	seq := strconv.FormatUint(pivotSeq.Add(1), 10)
	node, job := "deskfarm-disk-"+seq, "deskfarm-pivot-"+seq
	// The options libvirt 9.0 gives the disk it made (cache='unsafe',
	// discard='unmap' in domainxml.go), so the pivot changes no behaviour.
	cache := map[string]any{"direct": false, "no-flush": true}
	if err := m.qmp(ctx, "blockdev-add", map[string]any{
		"driver": "qcow2", "node-name": node, "read-only": false, "discard": "unmap", "cache": cache,
		"file":    map[string]any{"driver": "file", "filename": path, "discard": "unmap", "cache": cache},
		"backing": p.base,
	}, nil); err != nil {
		return err
	}
	if err := m.qmp(ctx, "blockdev-mirror", map[string]any{
		"job-id": job, "device": p.format, "target": node, "sync": "none",
	}, nil); err != nil {
		return err
	}
	if err := m.awaitJob(ctx, job, "ready"); err != nil {
		return err
	}
	if err := m.qmp(ctx, "job-complete", map[string]any{"id": job}, nil); err != nil {
		return err
	}
	if err := m.awaitJob(ctx, job, ""); err != nil {
		return err
	}
	if err := m.qmp(ctx, "query-block", nil, &devs); err != nil {
		return err
	}
	if !diskOn(devs, node) {
		return fmt.Errorf("pivot disk of vm %s: the mirror to %s completed but the guest's disk is not on it", m.vm, node)
	}
	if err := m.qmp(ctx, "blockdev-del", map[string]any{"node-name": p.format}, nil); err != nil {
		return err
	}
	return m.qmp(ctx, "blockdev-del", map[string]any{"node-name": p.storage}, nil)
}

// diskOn says whether a guest device has node under it.
func diskOn(devs []blockDevice, node string) bool {
	for _, d := range devs {
		if d.Inserted != nil && d.Inserted.Node == node {
			return true
		}
	}
	return false
}

// errJobFailed is a block job that ended with an error.
var errJobFailed = errors.New("block job failed")

// awaitJob polls query-jobs until job has status want, or is gone when
// want is "" (jobs are dismissed once concluded).
func (m *monitor) awaitJob(ctx context.Context, job, want string) error {
	for {
		var jobs []blockJob
		if err := m.qmp(ctx, "query-jobs", nil, &jobs); err != nil {
			return err
		}
		st, found := jobState(jobs, job)
		switch {
		case found && st.Error != "":
			return fmt.Errorf("vm %s: job %s: %w: %s", m.vm, job, errJobFailed, st.Error)
		case !found && want != "":
			return fmt.Errorf("vm %s: job %s: %w: gone before it was %s", m.vm, job, errJobFailed, want)
		case !found || st.Status == want:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("vm %s: job %s still %s: %w", m.vm, job, st.Status, ctx.Err())
		case <-time.After(pivotJobPoll):
		}
	}
}

func jobState(jobs []blockJob, id string) (blockJob, bool) {
	for _, j := range jobs {
		if j.ID == id {
			return j, true
		}
	}
	return blockJob{}, false
}
