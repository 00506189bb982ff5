// Package crds embeds deskfarm's CustomResourceDefinitions (Desktop,
// DesktopPool, DesktopClaim), so tests and tools install exactly the YAML
// that `kubectl apply -f deploy/kubernetes/crds/` applies.
package crds

import "embed"

// FS holds the CRD manifests, one kind per file.
//
//go:embed *.yaml
var FS embed.FS
