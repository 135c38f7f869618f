// Command schema prints the FileDescriptorProto of the real NRI API (as compiled
// into github.com/containerd/nri/pkg/api) as JSON on stdout. The Python
// conformance test compares it with nri_api/_pb/api.proto.
package main

import (
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protodesc"
)

func main() {
	fdp := protodesc.ToFileDescriptorProto(api.File_pkg_api_api_proto)
	out, err := protojson.MarshalOptions{Multiline: true, UseProtoNames: true}.Marshal(fdp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "schema: marshal descriptor: %v\n", err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
	os.Stdout.Write([]byte("\n"))
}
