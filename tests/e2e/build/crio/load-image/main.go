// Command load-image copies OCI archives into a private containers/storage store, the
// one CRI-O is started on, with the same containers/image and storage releases CRI-O
// vendors. CRI-O has no CRI call that reads a local archive; this is its library's own
// copy path (what `skopeo copy oci-archive:... containers-storage:...` does).
//
// Usage: load-image -root R -runroot RR -driver overlay ARCHIVE NAME [ARCHIVE NAME ...]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/oci/archive"
	"go.podman.io/image/v5/signature"
	istorage "go.podman.io/image/v5/storage"
	"go.podman.io/storage"
	"go.podman.io/storage/pkg/reexec"
)

func main() {
	if reexec.Init() { // storage applies layers in a re-executed child
		return
	}
	root := flag.String("root", "", "storage root (crio --root)")
	runroot := flag.String("runroot", "", "storage run root (crio --runroot)")
	driver := flag.String("driver", "overlay", "storage driver (crio --storage-driver)")
	flag.Parse()
	args := flag.Args()
	if *root == "" || *runroot == "" || len(args) == 0 || len(args)%2 != 0 {
		fmt.Fprintln(os.Stderr, "usage: load-image -root R -runroot RR [-driver D] ARCHIVE NAME ...")
		os.Exit(2)
	}
	if err := load(*root, *runroot, *driver, args); err != nil {
		fmt.Fprintln(os.Stderr, "load-image:", err)
		os.Exit(1)
	}
}

func load(root, runroot, driver string, args []string) error {
	store, err := storage.GetStore(storage.StoreOptions{
		GraphRoot: root, RunRoot: runroot, GraphDriverName: driver,
	})
	if err != nil {
		return fmt.Errorf("opening the store at %s: %w", root, err)
	}
	defer store.Shutdown(false) //nolint:errcheck
	policy, err := signature.NewPolicyContext(&signature.Policy{
		Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()},
	})
	if err != nil {
		return err
	}
	defer policy.Destroy() //nolint:errcheck
	for i := 0; i < len(args); i += 2 {
		archivePath, name := args[i], args[i+1]
		src, err := archive.NewReference(archivePath, "")
		if err != nil {
			return fmt.Errorf("%s: %w", archivePath, err)
		}
		named, err := reference.ParseNormalizedNamed(name)
		if err != nil {
			return fmt.Errorf("image name %q: %w", name, err)
		}
		dst, err := istorage.Transport.NewStoreReference(store, named, "")
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if _, err := copy.Image(context.Background(), policy, dst, src, &copy.Options{}); err != nil {
			return fmt.Errorf("copying %s to %s: %w", archivePath, name, err)
		}
		fmt.Println(name)
	}
	return nil
}
