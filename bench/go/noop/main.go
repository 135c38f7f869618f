// Command nri-noop is the benchmark peer of bench/plugins/noop.py written with the Go NRI
// stub: an external plugin that subscribes to CreateContainer and changes nothing.
//
// Usage: nri-noop -socket PATH -idx NN -name NAME
// Pre-registered (runtime-launched) it takes its identity and fd 3 from the environment,
// as the stub does by default.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type noop struct{}

func (noop) CreateContainer(_ context.Context, _ *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return nil, nil, nil
}

func main() {
	socket := flag.String("socket", "", "NRI socket path (default: the stub's)")
	idx := flag.String("idx", "", "plugin index")
	name := flag.String("name", "", "plugin name")
	flag.Parse()
	var opts []stub.Option
	if *socket != "" {
		opts = append(opts, stub.WithSocketPath(*socket))
	}
	if *idx != "" {
		opts = append(opts, stub.WithPluginIdx(*idx))
	}
	if *name != "" {
		opts = append(opts, stub.WithPluginName(*name))
	}
	opts = append(opts, stub.WithOnClose(func() { os.Exit(0) }))
	s, err := stub.New(noop{}, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nri-noop: %v\n", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "nri-noop: %v\n", err)
		os.Exit(1)
	}
}
