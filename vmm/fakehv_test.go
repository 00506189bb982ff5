package vmm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// fakeHV is vmm's one fake hypervisor, for unit tests of Create, Reset,
// recovery and lifecycle events without a VM. It keeps domains as records,
// plays a minimal guest (the session channel says "ready" and answers
// "time"; the agent answers ping, exec and set-time) and fails the
// operations a test names in fail. loadvm makes libvirt's agent connection
// close and reopen as agent lifecycle events say (at once, unless
// holdAgentEvents: then the test plays them with agentLifecycle).
type fakeHV struct {
	mu     sync.Mutex
	doms   map[string]*fakeDom
	nextID int32
	fail   map[string]error // by op: "define", "start", "undefine", "destroy", "metadata", "hmp:<verb>", "agent:<command>"
	// failOnce fails the next call of an op (as fail names them) only.
	failOnce map[string]error
	hmp      map[string]string
	block    map[string]chan struct{} // op -> closed to let a blocked call go on
	noReady  bool                     // the guest never says "ready"
	// agentReply, when set, answers agent commands before the defaults
	// (ok false: use the default).
	agentReply func(execute, cmd string) (reply string, ok bool)
	agentCmds  []string // every agent command as sent
	secmodel   string   // capabilities: the host's MAC model, "" for none
	// pidDir, when set, makes a started domain run a real process (sleep)
	// standing in for QEMU, with its pid in pidDir/<name>.pid as libvirt
	// keeps it.
	pidDir string
	// holdAgentEvents: loadvm sends no agent lifecycle events by itself.
	holdAgentEvents bool
	agentSubs       map[*fakeAgentSub]bool
	calls           []string
	evs             chan domainEvent
	closed          bool
}

// fakeAgentSub is one agentEvents subscription.
type fakeAgentSub struct {
	name string
	ch   chan agentState
}

type fakeDom struct {
	// agentDown: libvirt has closed its agent connection and not yet
	// opened a new one (commands answer "not connected").
	agentDown bool
	proc      *exec.Cmd
	dom       libvirt.Domain
	xml       string
	meta      string
	state     libvirt.DomainState
	ln        net.Listener
	conns     []net.Conn
	// disk and job are the QMP view of the guest's disk: the node under
	// it (libvirt's until a pivot) and a mirror job not yet completed.
	disk, diskFile, job, jobTarget string
}

var _ hypervisor = (*fakeHV)(nil)

func newFakeHV() *fakeHV {
	return &fakeHV{doms: map[string]*fakeDom{}, fail: map[string]error{}, hmp: map[string]string{},
		block: map[string]chan struct{}{}, evs: make(chan domainEvent, 64), agentSubs: map[*fakeAgentSub]bool{}}
}

// op records a call and returns the failure injected for it, after waiting
// out a block (or ctx).
func (f *fakeHV) op(ctx context.Context, name string) error {
	f.mu.Lock()
	f.calls = append(f.calls, name)
	err := f.fail[name]
	if e, ok := f.failOnce[name]; ok {
		err = e
		delete(f.failOnce, name)
	}
	blk := f.block[name]
	f.mu.Unlock()
	if blk != nil {
		select {
		case <-blk:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func notFound(name string) error {
	return libvirt.Error{Code: uint32(libvirt.ErrNoDomain), Message: "Domain not found: no domain with matching name '" + name + "'"}
}

func (f *fakeHV) get(name string) (*fakeDom, error) {
	d, ok := f.doms[name]
	if !ok {
		return nil, notFound(name)
	}
	return d, nil
}

var metaRE = regexp.MustCompile(`(?s)<metadata>(.*)</metadata>`)

func (f *fakeHV) defineDomain(ctx context.Context, xml string) (libvirt.Domain, error) {
	if err := f.op(ctx, "define"); err != nil {
		return libvirt.Domain{}, err
	}
	name := regexp.MustCompile(`<name>([^<]+)</name>`).FindStringSubmatch(xml)[1]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	d := &fakeDom{dom: libvirt.Domain{Name: name, ID: f.nextID}, xml: xml, state: libvirt.DomainShutoff}
	if m := metaRE.FindStringSubmatch(xml); m != nil {
		d.meta = m[1]
	}
	f.doms[name] = d
	return d.dom, nil
}

// addDomain puts a domain there as a previous deskfarm would have left it.
func (f *fakeHV) addDomain(md metadata, state libvirt.DomainState) {
	meta, err := md.marshal()
	if err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	name := DomainPrefix + md.ID
	f.doms[name] = &fakeDom{dom: libvirt.Domain{Name: name, ID: f.nextID}, meta: meta, state: state}
}

func (f *fakeHV) lookupDomain(ctx context.Context, name string) (libvirt.Domain, error) {
	if err := f.op(ctx, "lookup"); err != nil {
		return libvirt.Domain{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(name)
	if err != nil {
		return libvirt.Domain{}, err
	}
	return d.dom, nil
}

func (f *fakeHV) listDomains(ctx context.Context) ([]libvirt.Domain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []libvirt.Domain
	for _, d := range f.doms {
		out = append(out, d.dom)
	}
	return out, nil
}

var sessionRE = regexp.MustCompile(`<source mode='bind' path='([^']+)'/>\s*<target type='virtio' name='org.deskfarm.session.0'/>`)

func (f *fakeHV) startDomain(ctx context.Context, dom libvirt.Domain, paused bool) error {
	if err := f.op(ctx, "start"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(dom.Name)
	if err != nil {
		return err
	}
	if f.pidDir != "" {
		d.proc = exec.Command("sleep", "600")
		if err := d.proc.Start(); err != nil {
			return err
		}
		go d.proc.Wait()
		if err := os.WriteFile(filepath.Join(f.pidDir, dom.Name+".pid"), []byte(fmt.Sprintf("%d\n", d.proc.Process.Pid)), 0o600); err != nil {
			return err
		}
	}
	d.state = libvirt.DomainRunning
	if paused {
		// A QEMU started paused runs no guest code: the agent's port is
		// closed and libvirt has no connection to it until loadvm
		// restores a guest whose port is open.
		d.state = libvirt.DomainPaused
		d.agentDown = true
	}
	m := sessionRE.FindStringSubmatch(d.xml)
	if m == nil {
		return errors.New("fake: no session channel in domain xml")
	}
	ln, err := net.Listen("unix", m[1])
	if err != nil {
		return err
	}
	d.ln = ln
	ready := !f.noReady
	go f.guest(d, ln, ready)
	return nil
}

// guest plays the guest end of the session channel.
func (f *fakeHV) guest(d *fakeDom, ln net.Listener, ready bool) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		d.conns = append(d.conns, c)
		f.mu.Unlock()
		go func() {
			if ready {
				fmt.Fprintf(c, "ready\n")
			}
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				if ns, ok := strings.CutPrefix(sc.Text(), "time "); ok {
					fmt.Fprintf(c, "ok time %s\n", ns)
				}
			}
		}()
	}
}

// stopLocked makes a domain's QEMU go away.
func (d *fakeDom) stopLocked() {
	d.state = libvirt.DomainShutoff
	if d.proc != nil {
		d.proc.Process.Kill()
		d.proc = nil
	}
	if d.ln != nil {
		d.ln.Close()
		d.ln = nil
	}
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

func (f *fakeHV) destroyDomain(ctx context.Context, dom libvirt.Domain) error {
	if err := f.op(ctx, "destroy"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(dom.Name)
	if err != nil {
		return err
	}
	if d.state == libvirt.DomainShutoff {
		return libvirt.Error{Code: uint32(libvirt.ErrOperationInvalid), Message: "Requested operation is not valid: domain is not running"}
	}
	d.stopLocked()
	f.emitLocked(domainEvent{Name: dom.Name, Type: libvirt.DomainEventStopped, Detail: int32(libvirt.DomainEventStoppedDestroyed)})
	return nil
}

func (f *fakeHV) undefineDomain(ctx context.Context, dom libvirt.Domain) error {
	if err := f.op(ctx, "undefine"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(dom.Name); err != nil {
		return err
	}
	delete(f.doms, dom.Name)
	f.emitLocked(domainEvent{Name: dom.Name, Type: libvirt.DomainEventUndefined})
	return nil
}

func (f *fakeHV) domainCPUTime(ctx context.Context, dom libvirt.Domain) (time.Duration, error) {
	if err := f.op(ctx, "cputime"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(dom.Name); err != nil {
		return 0, err
	}
	return 0, nil
}

func (f *fakeHV) domainDiskRequests(ctx context.Context, dom libvirt.Domain) (int64, error) {
	if err := f.op(ctx, "diskrequests"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.get(dom.Name); err != nil {
		return 0, err
	}
	return 0, nil
}

func (f *fakeHV) domainState(ctx context.Context, dom libvirt.Domain) (libvirt.DomainState, error) {
	if err := f.op(ctx, "state"); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(dom.Name)
	if err != nil {
		return 0, err
	}
	return d.state, nil
}

func (f *fakeHV) domainMetadata(ctx context.Context, dom libvirt.Domain, ns string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(dom.Name)
	if err != nil {
		return "", err
	}
	if d.meta == "" {
		return "", libvirt.Error{Code: uint32(libvirt.ErrNoDomainMetadata), Message: "metadata not found"}
	}
	return d.meta, nil
}

func (f *fakeHV) setDomainMetadata(ctx context.Context, dom libvirt.Domain, key, ns, xml string) error {
	if err := f.op(ctx, "metadata"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d, err := f.get(dom.Name)
	if err != nil {
		return err
	}
	d.meta = xml
	return nil
}

func (f *fakeHV) monitorHMP(ctx context.Context, dom libvirt.Domain, cmd string) (string, error) {
	verb, _, _ := strings.Cut(cmd, " ")
	d, unlock, err := f.monitorOp(ctx, "hmp:"+verb, dom.Name)
	if err != nil {
		return "", err
	}
	defer unlock()
	switch verb {
	case "stop":
		d.state = libvirt.DomainPaused
	case "cont":
		d.state = libvirt.DomainRunning
	case "loadvm":
		if !f.holdAgentEvents && f.hmp[verb] == "" {
			f.agentLifecycleLocked(d, agentDisconnected)
			f.agentLifecycleLocked(d, agentConnected)
		}
	}
	return f.hmp[verb], nil
}

// monitorOp plays a monitor command as op on domain name, which must be
// running (or paused), as libvirt says otherwise; on success f.mu is held
// until unlock.
func (f *fakeHV) monitorOp(ctx context.Context, op, name string) (d *fakeDom, unlock func(), err error) {
	if err := f.op(ctx, op); err != nil {
		return nil, nil, err
	}
	f.mu.Lock()
	d, err = f.get(name)
	if err == nil && d.state == libvirt.DomainShutoff {
		err = libvirt.Error{Code: uint32(libvirt.ErrOperationInvalid), Message: "Requested operation is not valid: domain is not running"}
	}
	if err != nil {
		f.mu.Unlock()
		return nil, nil, err
	}
	return d, f.mu.Unlock, nil
}

// monitorQMP plays the QMP a disk pivot uses (pivot.go): the disk on the
// overlay the domain XML names, over the base its qcow2 header names, and
// a mirror job that is ready at once and pivots on job-complete.
func (f *fakeHV) monitorQMP(ctx context.Context, dom libvirt.Domain, cmd string) (string, error) {
	execute, args, err := decodeJSONCommand(cmd)
	if err != nil {
		return "", err
	}
	d, unlock, err := f.monitorOp(ctx, "qmp:"+execute, dom.Name)
	if err != nil {
		return "", err
	}
	defer unlock()
	overlay := ""
	if m := regexp.MustCompile(`<source file='([^']*)'`).FindStringSubmatch(d.xml); m != nil {
		overlay = m[1]
	}
	if d.disk == "" {
		d.disk, d.diskFile = "libvirt-1-format", overlay
	}
	ret := func(v any) (string, error) {
		b, err := json.Marshal(map[string]any{"return": v, "id": "libvirt-1"})
		return string(b), err
	}
	switch execute {
	case "query-block":
		return ret([]map[string]any{{"qdev": "/machine/peripheral/virtio-disk0/virtio-backend",
			"inserted": map[string]any{"node-name": d.disk, "file": d.diskFile}}})
	case "query-named-block-nodes":
		out, err := exec.Command("qemu-img", "info", "-U", "--output=json", overlay).Output()
		if err != nil {
			return "", fmt.Errorf("fake qmp: qemu-img info %s: %w", overlay, err)
		}
		var info struct {
			Backing string `json:"full-backing-filename"`
		}
		json.Unmarshal(out, &info)
		return ret([]map[string]any{
			{"node-name": "libvirt-1-format", "drv": "qcow2", "file": overlay, "ro": false},
			{"node-name": "libvirt-1-storage", "drv": "file", "file": overlay, "ro": false},
			{"node-name": "libvirt-2-format", "drv": "qcow2", "file": info.Backing, "ro": true},
			{"node-name": "libvirt-2-storage", "drv": "file", "file": info.Backing, "ro": false}})
	case "blockdev-mirror":
		d.job, d.jobTarget = args["job-id"].(string), args["target"].(string)
	case "query-jobs":
		if d.job == "" {
			return ret([]any{})
		}
		return ret([]map[string]any{{"id": d.job, "type": "mirror", "status": "ready"}})
	case "job-complete":
		d.disk, d.job = d.jobTarget, ""
	}
	return ret(map[string]any{})
}

// decodeJSONCommand decodes a command of QMP's shape ({"execute",
// "arguments"}), as QMP and the guest agent take.
func decodeJSONCommand(cmd string) (execute string, args map[string]any, err error) {
	var c struct {
		Execute   string         `json:"execute"`
		Arguments map[string]any `json:"arguments"`
	}
	err = json.Unmarshal([]byte(cmd), &c)
	return c.Execute, c.Arguments, err
}

func (f *fakeHV) agentCommand(ctx context.Context, dom libvirt.Domain, cmd string, idempotent bool) (string, error) {
	execute, _, err := decodeJSONCommand(cmd)
	if err != nil {
		return "", err
	}
	if err := f.op(ctx, "agent:"+execute); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agentCmds = append(f.agentCmds, cmd)
	d, err := f.get(dom.Name)
	if err != nil {
		return "", err
	}
	if d.state != libvirt.DomainRunning || d.agentDown {
		return "", libvirt.Error{Code: uint32(libvirt.ErrAgentUnresponsive), Message: "Guest agent is not responding: QEMU guest agent is not connected"}
	}
	if f.agentReply != nil {
		if r, ok := f.agentReply(execute, cmd); ok {
			return r, nil
		}
	}
	switch execute {
	case "guest-exec":
		return `{"return":{"pid":42}}`, nil
	case "guest-exec-status":
		return `{"return":{"exitcode":0,"exited":true}}`, nil
	}
	return `{"return":{}}`, nil
}

func (f *fakeHV) agentEvents(ctx context.Context, dom libvirt.Domain) (<-chan agentState, error) {
	if err := f.op(ctx, "agentevents"); err != nil {
		return nil, err
	}
	sub := &fakeAgentSub{name: dom.Name, ch: make(chan agentState, 8)}
	f.mu.Lock()
	f.agentSubs[sub] = true
	f.mu.Unlock()
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		delete(f.agentSubs, sub)
		close(sub.ch)
		f.mu.Unlock()
	}()
	return sub.ch, nil
}

// agentLifecycle plays libvirt closing or opening its agent connection to
// a domain, and the event it sends.
func (f *fakeHV) agentLifecycle(name string, st agentState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agentLifecycleLocked(f.doms[name], st)
}

func (f *fakeHV) agentLifecycleLocked(d *fakeDom, st agentState) {
	d.agentDown = st == agentDisconnected
	for sub := range f.agentSubs {
		if sub.name == d.dom.Name {
			sub.ch <- st
		}
	}
}

// agentSubscriptions is the number of live agentEvents subscriptions.
func (f *fakeHV) agentSubscriptions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.agentSubs)
}

func (f *fakeHV) hostInfo(context.Context) (uint64, int, error) { return 16 << 20, 4, nil }

func (f *fakeHV) events() <-chan domainEvent { return f.evs }

func (f *fakeHV) emitLocked(ev domainEvent) {
	if !f.closed {
		f.evs <- ev
	}
}

// kill makes a domain's QEMU die as libvirt reports it.
func (f *fakeHV) kill(name string, detail libvirt.DomainEventStoppedDetailType) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.doms[name]
	d.stopLocked()
	f.emitLocked(domainEvent{Name: name, Type: libvirt.DomainEventStopped, Detail: int32(detail)})
}

func (f *fakeHV) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.evs)
		for _, d := range f.doms {
			d.stopLocked()
		}
	}
	return nil
}

// domainNames lists the fake's domains.
func (f *fakeHV) domainNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.doms {
		out = append(out, n)
	}
	return out
}

// capabilities is what libvirt 9.0 on this Debian 12 host (no AppArmor,
// no SELinux) lists as security models, cut to that part; secmodel is set by
// a test to play another host.
func (f *fakeHV) health() error { return nil }

func (f *fakeHV) capabilities(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.secmodel != "" {
		return "<capabilities><host><secmodel><model>" + f.secmodel + "</model><doi>0</doi></secmodel>" +
			"<secmodel><model>dac</model><doi>0</doi></secmodel></host></capabilities>", nil
	}
	return "<capabilities><host><secmodel><model>none</model><doi>0</doi></secmodel>" +
		"<secmodel><model>dac</model><doi>0</doi></secmodel></host></capabilities>", nil
}
