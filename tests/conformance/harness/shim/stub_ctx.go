package main

// Go stub handler signatures of NRI v0.6.0 and later: a context first,
// UpdateContainer with the requested resources.

import (
	"context"

	"github.com/containerd/nri/pkg/api"
)

func (p *goPlugin) Configure(_ context.Context, config, runtime, version string) (api.EventMask, error) {
	return p.configure(config, runtime, version)
}

func (p *goPlugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	return p.synchronize(pods, ctrs)
}

func (p *goPlugin) Shutdown(context.Context) {}

func (p *goPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.simple("RUN_POD_SANDBOX", pod, nil)
}

func (p *goPlugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.simple("STOP_POD_SANDBOX", pod, nil)
}

func (p *goPlugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	return p.simple("REMOVE_POD_SANDBOX", pod, nil)
}

func (p *goPlugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return p.createContainer(pod, ctr)
}

func (p *goPlugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("POST_CREATE_CONTAINER", pod, ctr)
}

func (p *goPlugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("START_CONTAINER", pod, ctr)
}

func (p *goPlugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("POST_START_CONTAINER", pod, ctr)
}

func (p *goPlugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	return p.updateContainer(pod, ctr)
}

func (p *goPlugin) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("POST_UPDATE_CONTAINER", pod, ctr)
}

func (p *goPlugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	return p.stopContainer(pod, ctr)
}

func (p *goPlugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("REMOVE_CONTAINER", pod, ctr)
}
