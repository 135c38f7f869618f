package main

// NRI v0.8.0 and later: a new external plugin is synchronized under the
// adaptation's sync lock and added to the invocation list before that lock is
// released; BlockPluginSync waits for it. containerd also holds the same block
// while a CRI request is relayed to plugins, and so does the harness.

import "github.com/containerd/nri/pkg/adaptation"

func pluginSyncBarrier(r *adaptation.Adaptation) {
	r.BlockPluginSync().Unblock()
	r.Lock()
	defer r.Unlock()
}

func blockPluginSync(r *adaptation.Adaptation) func() {
	b := r.BlockPluginSync()
	return b.Unblock
}
