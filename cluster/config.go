package cluster

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig is the apiserver connection: from the kubeconfig file, or,
// with none, the pod's in-cluster config (its ServiceAccount token).
// client-go's default rate limit (5 QPS, burst 10) would throttle claims
// on our side, so it is raised; the apiserver's own limits apply.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (no --kubeconfig given): %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	}
	cfg.QPS, cfg.Burst = 500, 1000
	cfg.UserAgent = "deskfarm"
	return cfg, nil
}
