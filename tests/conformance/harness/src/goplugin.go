package main

// In-process Go plugins built on the real NRI stub (pkg/stub) of the same
// version as the runtime side. They are reference peers: a test can run the
// same scenario against them and against a Python plugin, and they provide
// the "other plugin" in conflict tests.
//
// Behaviours:
//   noop    record every event, adjust nothing
//   cpuset  CreateContainer sets cpuset CPUs to the configured value
//   fail    CreateContainer fails for a container named "fail-me"
//
// The handler methods with the version's exact signatures are in ../shim/stub_*.go
// and call the version-independent methods below.

import (
	"context"
	"fmt"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type seenEvent map[string]any

type goPlugin struct {
	name      string
	idx       string
	behaviour string
	cpus      string
	mask      api.EventMask
	stub      stub.Stub

	mu     sync.Mutex
	events []seenEvent
	closed bool
}

func newGoPlugin(name, idx, behaviour, cpus string, events []string) (*goPlugin, error) {
	switch behaviour {
	case "", "noop":
		behaviour = "noop"
	case "cpuset":
		if cpus == "" {
			return nil, fmt.Errorf("harness: Go plugin %q: behaviour cpuset needs cpus", name)
		}
	case "fail":
	default:
		return nil, fmt.Errorf("harness: Go plugin %q: unknown behaviour %q; expected noop, cpuset or fail", name, behaviour)
	}
	p := &goPlugin{name: name, idx: idx, behaviour: behaviour, cpus: cpus}
	for _, e := range events {
		v, ok := api.Event_value[e]
		if !ok {
			return nil, fmt.Errorf("harness: Go plugin %q: unknown event %q", name, e)
		}
		p.mask.Set(api.Event(v))
	}
	return p, nil
}

func (p *goPlugin) start(socket string) error {
	s, err := stub.New(p,
		stub.WithPluginName(p.name),
		stub.WithPluginIdx(p.idx),
		stub.WithSocketPath(socket),
		stub.WithOnClose(p.onClose),
	)
	if err != nil {
		return fmt.Errorf("harness: Go plugin %q: %w", p.name, err)
	}
	p.stub = s
	if err := s.Start(context.Background()); err != nil {
		return fmt.Errorf("harness: Go plugin %q: %w", p.name, err)
	}
	return nil
}

func (p *goPlugin) onClose() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

func (p *goPlugin) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *goPlugin) seen() []seenEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenEvent{}, p.events...)
}

func (p *goPlugin) record(e seenEvent) {
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
}

func (p *goPlugin) recordEvent(event string, pod *api.PodSandbox, ctr *api.Container) {
	e := seenEvent{"event": event}
	if pod != nil {
		e["pod"] = pod.GetId()
	}
	if ctr != nil {
		e["container"] = ctr.GetId()
	}
	p.record(e)
}

func (p *goPlugin) configure(config, runtime, version string) (api.EventMask, error) {
	p.record(seenEvent{"event": "CONFIGURE", "config": config, "runtime_name": runtime, "runtime_version": version})
	return p.mask, nil
}

func (p *goPlugin) synchronize(pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	podIDs := make([]string, 0, len(pods))
	for _, pod := range pods {
		podIDs = append(podIDs, pod.GetId())
	}
	ctrIDs := make([]string, 0, len(ctrs))
	for _, c := range ctrs {
		ctrIDs = append(ctrIDs, c.GetId())
	}
	p.record(seenEvent{"event": "SYNCHRONIZE", "pods": podIDs, "containers": ctrIDs})
	return nil, nil
}

func (p *goPlugin) createContainer(pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.recordEvent("CREATE_CONTAINER", pod, ctr)
	switch p.behaviour {
	case "cpuset":
		adj := &api.ContainerAdjustment{}
		adj.SetLinuxCPUSetCPUs(p.cpus)
		return adj, nil, nil
	case "fail":
		if ctr.GetName() == "fail-me" {
			return nil, nil, fmt.Errorf("go plugin %s refuses container %s", p.name, ctr.GetName())
		}
	}
	return nil, nil, nil
}

func (p *goPlugin) updateContainer(pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.recordEvent("UPDATE_CONTAINER", pod, ctr)
	return nil, nil
}

func (p *goPlugin) stopContainer(pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.recordEvent("STOP_CONTAINER", pod, ctr)
	return nil, nil
}

func (p *goPlugin) simple(event string, pod *api.PodSandbox, ctr *api.Container) error {
	p.recordEvent(event, pod, ctr)
	return nil
}
