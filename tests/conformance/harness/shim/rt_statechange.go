package main

// NRI v0.2-v0.11: the simple pod and container events are relayed with a
// StateChangeEvent (the adaptation fills in the event kind).

import (
	"context"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
)

func simpleEvent(ctx context.Context, r *adaptation.Adaptation, op string, pod *api.PodSandbox, ctr *api.Container) error {
	podEvt := &api.StateChangeEvent{Pod: pod}
	evt := &api.StateChangeEvent{Pod: pod, Container: ctr}
	switch op {
	case "run_pod":
		return r.RunPodSandbox(ctx, podEvt)
	case "stop_pod":
		return r.StopPodSandbox(ctx, podEvt)
	case "remove_pod":
		return r.RemovePodSandbox(ctx, podEvt)
	case "post_create":
		return r.PostCreateContainer(ctx, evt)
	case "start_container":
		return r.StartContainer(ctx, evt)
	case "post_start":
		return r.PostStartContainer(ctx, evt)
	case "post_update":
		return r.PostUpdateContainer(ctx, evt)
	case "remove_container":
		return r.RemoveContainer(ctx, evt)
	}
	return extraSimpleEvent(ctx, r, op, podEvt)
}
