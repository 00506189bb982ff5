package vmm

import (
	"errors"
	"strings"
	"testing"
)

// Every real QMP reply parses as what it was: a return, or a *QMPError
// with QEMU's class and description.
func TestParseQMPReplyOnCaptures(t *testing.T) {
	caps := qmpCaptures(t)
	if len(caps) == 0 {
		t.Fatal("no QMP captures in testdata/captures.json")
	}
	wantErr := map[string]string{
		"blockdev-add-taken":   "Duplicate nodes with node-name='capture-node'",
		"blockdev-del-missing": "Failed to find node with node-name='capture-node'",
		"unknown-command":      "The command no-such-command has not been found",
	}
	for name, c := range caps {
		err := parseQMPReply(name, c.Output, nil)
		desc, bad := wantErr[name]
		var qe *QMPError
		switch {
		case bad && !errors.As(err, &qe):
			t.Errorf("%s: %q parsed as %v, want a *QMPError", name, c.Output, err)
		case bad && (qe.Desc != desc || qe.Class == "" || !strings.Contains(err.Error(), desc)):
			t.Errorf("%s: error %+v, want description %q", name, qe, desc)
		case !bad && err != nil:
			t.Errorf("%s: %q parsed as %v, want success", name, c.Output, err)
		}
	}
	for _, bad := range []string{"", "{}", `{"id":"libvirt-1"}`, "not json"} {
		if err := parseQMPReply("x", bad, nil); err == nil {
			t.Errorf("reply %q parsed as success", bad)
		}
	}
}

// A pivot finds the disk's format and file nodes and the base's node in
// a real VM's answers (libvirt 9.0's -blockdev names), and refuses
// answers that do not name them once.
func TestPlanPivotOnCaptures(t *testing.T) {
	caps := qmpCaptures(t)
	var devs []blockDevice
	var nodes []blockNode
	if err := parseQMPReply("query-block", caps["query-block"].Output, &devs); err != nil {
		t.Fatal(err)
	}
	if err := parseQMPReply("query-named-block-nodes", caps["query-named-block-nodes"].Output, &nodes); err != nil {
		t.Fatal(err)
	}
	var overlay, base string
	for _, n := range nodes {
		if n.Driver == "qcow2" && !n.ReadOnly {
			overlay = n.File
		}
		if n.Driver == "qcow2" && n.ReadOnly {
			base = n.File
		}
	}
	if !strings.HasSuffix(overlay, "/disk.qcow2") || !strings.HasSuffix(base, "/disk.qcow2") || overlay == base {
		t.Fatalf("captured nodes %+v: overlay %q, base %q", nodes, overlay, base)
	}
	p, err := planPivot(devs, nodes, overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	if want := (pivotPlan{format: "libvirt-1-format", storage: "libvirt-1-storage", base: "libvirt-2-format"}); p != want {
		t.Errorf("plan %+v, want %+v", p, want)
	}
	if _, err := planPivot(devs, nodes, "/elsewhere.qcow2", base); err == nil || !strings.Contains(err.Error(), "no guest disk") {
		t.Errorf("a pivot of a file no disk is on: %v", err)
	}
	if _, err := planPivot(devs, nodes, overlay, "/other-base.qcow2"); err == nil || !strings.Contains(err.Error(), "base") {
		t.Errorf("a pivot onto a base QEMU has not open: %v", err)
	}
	twice := append(append([]blockNode{}, nodes...), blockNode{Name: "x", Driver: "file", File: overlay})
	if _, err := planPivot(devs, twice, overlay, base); err == nil || !strings.Contains(err.Error(), "two file nodes") {
		t.Errorf("two file nodes on the disk: %v", err)
	}
}

// A mirror job's state as query-jobs gives it, ready and gone.
func TestJobStateOnCaptures(t *testing.T) {
	caps := qmpCaptures(t)
	var jobs []blockJob
	if err := parseQMPReply("query-jobs", caps["query-jobs-ready"].Output, &jobs); err != nil {
		t.Fatal(err)
	}
	if j, ok := jobState(jobs, "capture-job"); !ok || j.Status != "ready" || j.Type != "mirror" || j.Error != "" {
		t.Errorf("captured job %+v, %v", j, ok)
	}
	if err := parseQMPReply("query-jobs", caps["query-jobs-none"].Output, &jobs); err != nil {
		t.Fatal(err)
	}
	if _, ok := jobState(jobs, "capture-job"); ok {
		t.Error("a job in an empty list")
	}
}
