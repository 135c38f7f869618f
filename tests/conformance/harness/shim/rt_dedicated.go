package main

// NRI v0.12 and later: every event has its own request type; the adaptation
// tries the dedicated plugin RPC first and falls back to StateChange only if
// the plugin answers UNIMPLEMENTED.

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
)

func simpleEvent(ctx context.Context, r *adaptation.Adaptation, op string, pod *api.PodSandbox, ctr *api.Container) error {
	switch op {
	case "run_pod":
		return r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
	case "stop_pod":
		return r.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod})
	case "remove_pod":
		return r.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
	case "post_update_pod":
		return r.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: pod})
	case "post_create":
		return r.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr})
	case "start_container":
		return r.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr})
	case "post_start":
		return r.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: ctr})
	case "post_update":
		return r.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr})
	case "remove_container":
		return r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr})
	}
	return fmt.Errorf("harness: unknown op %q", op)
}

func updatePodSandbox(ctx context.Context, r *adaptation.Adaptation, pod *api.PodSandbox, ovh, res *api.LinuxResources) (proto.Message, error) {
	rsp, err := r.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{Pod: pod, OverheadLinuxResources: ovh, LinuxResources: res})
	if err != nil {
		return nil, err
	}
	return rsp, nil
}
