module nri-resmgr/tests/conformance/harness/v0.3.0

go 1.24

require (
	github.com/containerd/nri v0.3.0
	google.golang.org/protobuf v1.28.1
)

require (
	github.com/containerd/ttrpc v1.2.1 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/golang/protobuf v1.5.2 // indirect
	github.com/opencontainers/runtime-spec v1.0.3-0.20220825212826-86290f6a00fb // indirect
	github.com/sirupsen/logrus v1.8.1 // indirect
	golang.org/x/net v0.1.0 // indirect
	golang.org/x/sys v0.1.0 // indirect
	golang.org/x/text v0.4.0 // indirect
	google.golang.org/genproto v0.0.0-20220502173005-c8bf987b8c21 // indirect
	google.golang.org/grpc v1.47.0 // indirect
	k8s.io/cri-api v0.25.3 // indirect
)
