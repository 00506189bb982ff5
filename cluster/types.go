package cluster

import (
	"fmt"
	"strings"

	"github.com/deskfarm/deskfarm/pool"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The resources, as the dynamic client addresses them. Their schemas are
// deploy/kubernetes/crds/*.yaml; the json tags below match them.
var (
	DesktopResource      = GroupVersion.WithResource("desktops")
	DesktopPoolResource  = GroupVersion.WithResource("desktoppools")
	DesktopClaimResource = GroupVersion.WithResource("desktopclaims")
)

// Kinds.
const (
	KindDesktop      = "Desktop"
	KindDesktopPool  = "DesktopPool"
	KindDesktopClaim = "DesktopClaim"
)

// Desktop is one pool VM of one node, named DesktopName(node, vm).
type Desktop struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DesktopSpec   `json:"spec"`
	Status            DesktopStatus `json:"status,omitempty"`
}

// DesktopSpec says where the VM lives; it never changes.
type DesktopSpec struct {
	Node  string `json:"node"`
	Pool  string `json:"pool"`
	VM    string `json:"vm"`
	Image string `json:"image,omitempty"`
	URL   string `json:"url,omitempty"` // the owner agent's --advertise base URL
}

// DesktopStatus is the VM's state and, while leased, its holder.
type DesktopStatus struct {
	State     pool.DesktopState `json:"state,omitempty"`
	Episode   string            `json:"episode,omitempty"`
	ClaimedBy string            `json:"claimedBy,omitempty"` // node of the claiming agent
	ClaimedAt *metav1.Time      `json:"claimedAt,omitempty"`
	ExpiresAt *metav1.Time      `json:"expiresAt,omitempty"`
	Claim     string            `json:"claim,omitempty"` // DesktopClaim name, if any
	Reason    string            `json:"reason,omitempty"`
}

// DesktopPool is the desired state of one pool on every node; its name is
// the pool's name.
type DesktopPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DesktopPoolSpec   `json:"spec"`
	Status            DesktopPoolStatus `json:"status,omitempty"`
}

// DesktopPoolSpec mirrors pool.PoolConfig, per node (zero: pool's default).
type DesktopPoolSpec struct {
	Image             string `json:"image"`
	MemoryMiB         int    `json:"memoryMiB,omitempty"`
	VCPUs             int    `json:"vcpus,omitempty"`
	Width             int    `json:"width,omitempty"`
	Height            int    `json:"height,omitempty"`
	ScreenshotSize    string `json:"screenshotSize,omitempty"`
	Network           string `json:"network,omitempty"`
	Forwards          []int  `json:"forwards,omitempty"`
	WarmPerNode       int    `json:"warmPerNode,omitempty"`
	MaxPerNode        int    `json:"maxPerNode,omitempty"`
	DefaultTTLSeconds int    `json:"defaultTTLSeconds,omitempty"`
	MaxTTLSeconds     int    `json:"maxTTLSeconds,omitempty"`
	// Record and RecordOptions are the pool's recording default
	// (pool.PoolConfig.Record).
	Record        bool              `json:"record,omitempty"`
	RecordOptions PoolRecordOptions `json:"recordOptions,omitempty"`
}

// PoolRecordOptions are pool.RecordOptions in the resource's spelling.
type PoolRecordOptions struct {
	A11y      bool `json:"a11y,omitempty"`
	KeepFiles bool `json:"keepFiles,omitempty"`
	NoVideo   bool `json:"noVideo,omitempty"`
}

// DesktopPoolStatus has one entry per node, each written by its agent.
type DesktopPoolStatus struct {
	Nodes []PoolNodeStatus `json:"nodes,omitempty"`
}

// PoolNodeStatus counts one node's VMs of the pool by state.
type PoolNodeStatus struct {
	Node      string       `json:"node"`
	Booting   int          `json:"booting"`
	Free      int          `json:"free"`
	Leased    int          `json:"leased"`
	Resetting int          `json:"resetting"`
	Dead      int          `json:"dead"`
	UpdatedAt *metav1.Time `json:"updatedAt,omitempty"`
}

// DesktopClaim asks for an episode of a pool (the kubectl path).
type DesktopClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              DesktopClaimSpec   `json:"spec"`
	Status            DesktopClaimStatus `json:"status,omitempty"`
}

// DesktopClaimSpec names the pool and the lease.
type DesktopClaimSpec struct {
	Pool       string `json:"pool"`
	TTLSeconds int    `json:"ttlSeconds,omitempty"` // 0: the pool's default
}

// ClaimPhase is a DesktopClaim's progress.
type ClaimPhase string

// Claim phases. An empty phase is Pending (a claim just created).
const (
	ClaimPending ClaimPhase = "Pending"
	ClaimBinding ClaimPhase = "Binding" // BoundBy's agent is claiming a desktop for it
	ClaimBound   ClaimPhase = "Bound"   // Episode runs on Node
	ClaimEnded   ClaimPhase = "Ended"   // the episode ended
	ClaimFailed  ClaimPhase = "Failed"  // it cannot be served (Message says why)
)

// DesktopClaimStatus is the claim's binding and, once Bound, its episode.
type DesktopClaimStatus struct {
	Phase     ClaimPhase   `json:"phase,omitempty"`
	BoundBy   string       `json:"boundBy,omitempty"`
	Episode   string       `json:"episode,omitempty"`
	Node      string       `json:"node,omitempty"`
	URL       string       `json:"url,omitempty"`
	ViewerURL string       `json:"viewerURL,omitempty"`
	Desktop   string       `json:"desktop,omitempty"`
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	Message   string       `json:"message,omitempty"`
}

// DesktopName is the Desktop object's name of vm on node: "<node>.<vm>",
// the vm id lower-cased with anything a DNS subdomain cannot hold as '-'.
func DesktopName(node, vm string) string {
	return node + "." + dnsLabel(vm)
}

func dnsLabel(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b), "-")
}

// LeaseName is the node Lease's name.
func LeaseName(node string) string { return "deskfarm-node-" + node }

// Conversion to and from unstructured, the dynamic client's form.

func fromUnstructured[T any](u *unstructured.Unstructured) (*T, error) {
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		return nil, fmt.Errorf("decode %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return &v, nil
}

func toUnstructured(obj any, kind string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: Group, Version: Version, Kind: kind})
	return u, nil
}

// DesktopFrom decodes a Desktop.
func DesktopFrom(u *unstructured.Unstructured) (*Desktop, error) { return fromUnstructured[Desktop](u) }

// DesktopPoolFrom decodes a DesktopPool.
func DesktopPoolFrom(u *unstructured.Unstructured) (*DesktopPool, error) {
	return fromUnstructured[DesktopPool](u)
}

// DesktopClaimFrom decodes a DesktopClaim.
func DesktopClaimFrom(u *unstructured.Unstructured) (*DesktopClaim, error) {
	return fromUnstructured[DesktopClaim](u)
}

// Unstructured encodes d.
func (d *Desktop) Unstructured() (*unstructured.Unstructured, error) {
	return toUnstructured(d, KindDesktop)
}

// Unstructured encodes p.
func (p *DesktopPool) Unstructured() (*unstructured.Unstructured, error) {
	return toUnstructured(p, KindDesktopPool)
}

// Unstructured encodes c.
func (c *DesktopClaim) Unstructured() (*unstructured.Unstructured, error) {
	return toUnstructured(c, KindDesktopClaim)
}

// desktopLabels are the labels a Desktop carries for its status.
func desktopLabels(d *Desktop) map[string]string {
	l := map[string]string{}
	for k, v := range d.Labels {
		l[k] = v
	}
	l[LabelNode] = d.Spec.Node
	l[LabelPool] = d.Spec.Pool
	l[LabelState] = string(d.Status.State)
	if d.Status.State == pool.DesktopLeased && d.Status.Episode != "" {
		l[LabelEpisode] = d.Status.Episode
	} else {
		delete(l, LabelEpisode)
	}
	return l
}
