package main

// Go stub handlers that exist from NRI v0.10.0: pod sandbox resource updates.

import (
	"context"

	"github.com/containerd/nri/pkg/api"
)

func (p *goPlugin) UpdatePodSandbox(_ context.Context, pod *api.PodSandbox, _, _ *api.LinuxResources) error {
	return p.simple("UPDATE_POD_SANDBOX", pod, nil)
}

func (p *goPlugin) PostUpdatePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.simple("POST_UPDATE_POD_SANDBOX", pod, nil)
}
