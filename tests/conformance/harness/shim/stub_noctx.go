package main

// Go stub handler signatures of NRI v0.3.0: no context argument,
// UpdateContainer without the requested resources, Shutdown with a request.

import "github.com/containerd/nri/pkg/api"

func (p *goPlugin) Configure(config, runtime, version string) (api.EventMask, error) {
	return p.configure(config, runtime, version)
}

func (p *goPlugin) Synchronize(pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	return p.synchronize(pods, ctrs)
}

func (p *goPlugin) Shutdown(*api.ShutdownRequest) {}

func (p *goPlugin) RunPodSandbox(pod *api.PodSandbox) error {
	return p.simple("RUN_POD_SANDBOX", pod, nil)
}

func (p *goPlugin) StopPodSandbox(pod *api.PodSandbox) error {
	return p.simple("STOP_POD_SANDBOX", pod, nil)
}

func (p *goPlugin) RemovePodSandbox(pod *api.PodSandbox) error {
	return p.simple("REMOVE_POD_SANDBOX", pod, nil)
}

func (p *goPlugin) CreateContainer(pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return p.createContainer(pod, ctr)
}

func (p *goPlugin) PostCreateContainer(pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("POST_CREATE_CONTAINER", pod, ctr)
}

func (p *goPlugin) StartContainer(pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("START_CONTAINER", pod, ctr)
}

func (p *goPlugin) PostStartContainer(pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("POST_START_CONTAINER", pod, ctr)
}

func (p *goPlugin) UpdateContainer(pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	return p.updateContainer(pod, ctr)
}

func (p *goPlugin) PostUpdateContainer(pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("POST_UPDATE_CONTAINER", pod, ctr)
}

func (p *goPlugin) StopContainer(pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	return p.stopContainer(pod, ctr)
}

func (p *goPlugin) RemoveContainer(pod *api.PodSandbox, ctr *api.Container) error {
	return p.simple("REMOVE_CONTAINER", pod, ctr)
}
