package main

// NRI v0.10-v0.11: UpdatePodSandbox is a request, PostUpdatePodSandbox a StateChangeEvent.

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
)

func extraSimpleEvent(ctx context.Context, r *adaptation.Adaptation, op string, podEvt *api.StateChangeEvent) error {
	if op == "post_update_pod" {
		return r.PostUpdatePodSandbox(ctx, podEvt)
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
