package main

// NRI before v0.10: no UpdatePodSandbox / PostUpdatePodSandbox.

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
)

func extraSimpleEvent(_ context.Context, _ *adaptation.Adaptation, op string, _ *api.StateChangeEvent) error {
	return fmt.Errorf("harness: op %q is not supported by NRI %s", op, nriModuleVersion())
}

func updatePodSandbox(_ context.Context, _ *adaptation.Adaptation, _ *api.PodSandbox, _, _ *api.LinuxResources) (proto.Message, error) {
	return nil, fmt.Errorf("harness: op %q is not supported by NRI %s", "update_pod", nriModuleVersion())
}
