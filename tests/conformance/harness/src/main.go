// Command nri-fake-runtime drives the real runtime side of NRI (containerd/nri
// pkg/adaptation) on behalf of a test written in another language.
//
// # Theory of operation
//
// The program is one fake container runtime. It reads one JSON command per line
// on stdin and writes exactly one JSON reply per command on stdout, in order.
// Every reply carries "op" (the command's op), "ok" and, on failure, "error"
// (the text of the Go error, verbatim). NRI messages inside commands and
// replies are protojson (proto field names, e.g. "container_id"), decoded and
// encoded with the API types of the NRI version this binary was built with, so
// a field that version does not know is an error, not silently dropped.
//
// The same source is compiled once per NRI version (see ../v*/go.mod). What
// differs between versions lives in small files under ../shim: how the simple
// pod and container events reach the adaptation (StateChange up to v0.11,
// dedicated requests from v0.12), whether UpdatePodSandbox exists, whether the
// default validator exists (v0.10+), how to wait
// until a freshly synchronized plugin is really registered, and the handler
// signatures of the in-process Go stub plugins.
//
// Timing: "elapsed_ns" is measured here, around the single adaptation call,
// so it excludes JSON and pipe overhead. Benchmarks use it.
//
// Logs of the NRI library (runtime side and in-process stubs) go to stderr and
// are also kept in memory; the "logs" command returns them.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// command is one request line. Fields not used by an op are ignored.
type command struct {
	Op string `json:"op"`

	// start
	Dir                   string            `json:"dir"`
	RuntimeName           string            `json:"runtime_name"`
	RuntimeVersion        string            `json:"runtime_version"`
	Pods                  []json.RawMessage `json:"pods"`
	Containers            []json.RawMessage `json:"containers"`
	RequestTimeoutMs      int64             `json:"request_timeout_ms"`
	RegistrationTimeoutMs int64             `json:"registration_timeout_ms"`
	DisableExternal       bool              `json:"disable_external"`
	// the runtime's default_validator table, keyed by its TOML names (NRI v0.10+)
	DefaultValidator map[string]json.RawMessage `json:"default_validator"`

	// events
	Pod                    json.RawMessage `json:"pod"`
	Container              json.RawMessage `json:"container"`
	LinuxResources         json.RawMessage `json:"linux_resources"`
	OverheadLinuxResources json.RawMessage `json:"overhead_linux_resources"`

	// wait_synced
	TimeoutMs int64 `json:"timeout_ms"`

	// updates
	Fail []string `json:"fail"`

	// go_plugin
	Name      string   `json:"name"`
	Idx       string   `json:"idx"`
	Behaviour string   `json:"behaviour"`
	Cpus      string   `json:"cpus"`
	Events    []string `json:"events"`

	// logs
	Clear bool `json:"clear"`
}

type reply map[string]any

type syncRecord struct {
	Updates   []*api.ContainerUpdate
	Err       string
	Pods      int
	Ctrs      int
	ElapsedNs int64
}

type harness struct {
	mu      sync.Mutex
	r       *adaptation.Adaptation
	dir     string
	pods    []*api.PodSandbox
	ctrs    []*api.Container
	syncC   chan syncRecord
	calls   [][]*api.ContainerUpdate
	failIDs map[string]bool
	plugins map[string]*goPlugin
	logs    *memLog
	// starting is set while Adaptation.Start runs: a SyncFn call then is the
	// start-up synchronization of the pre-registered plugins (NRI v0.8+).
	starting   bool
	startupRec []syncRecord
}

func main() {
	logs := &memLog{}
	nrilog.Set(logs)

	h := &harness{
		syncC:   make(chan syncRecord, 1024),
		plugins: map[string]*goPlugin{},
		failIDs: map[string]bool{},
		logs:    logs,
	}

	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)

	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			rpl := h.handle(line)
			if encErr := out.Encode(rpl); encErr != nil {
				fmt.Fprintf(os.Stderr, "harness: cannot encode reply: %v\n", encErr)
				os.Exit(2)
			}
			if rpl["op"] == "quit" {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "harness: reading stdin: %v\n", err)
			}
			h.shutdown()
			return
		}
	}
}

func (h *harness) handle(line []byte) (rpl reply) {
	var cmd command
	if err := json.Unmarshal(line, &cmd); err != nil {
		return reply{"op": "", "ok": false, "error": fmt.Sprintf("harness: bad command line: %v", err)}
	}
	defer func() {
		if p := recover(); p != nil {
			rpl = reply{"ok": false, "error": fmt.Sprintf("harness: panic: %v\n%s", p, debug.Stack())}
		}
		rpl["op"] = cmd.Op
		if _, ok := rpl["ok"]; !ok {
			rpl["ok"] = true
		}
	}()

	switch cmd.Op {
	case "version":
		return reply{"nri_version": nriModuleVersion(), "go_version": strings.TrimPrefix(goVersion(), "go")}
	case "start":
		return h.start(&cmd)
	case "stop":
		return h.stop()
	case "set_state":
		pods, ctrs, err := decodeState(&cmd)
		if err != nil {
			return fail(err)
		}
		h.mu.Lock()
		h.pods, h.ctrs = pods, ctrs
		h.mu.Unlock()
		return reply{}
	case "wait_synced":
		return h.waitSynced(&cmd)
	case "updates":
		h.mu.Lock()
		calls := h.calls
		h.calls = nil
		h.mu.Unlock()
		list := make([]any, 0, len(calls))
		for _, c := range calls {
			list = append(list, encodeList(c))
		}
		return reply{"calls": list}
	case "fail_updates":
		h.mu.Lock()
		h.failIDs = map[string]bool{}
		for _, id := range cmd.Fail {
			h.failIDs[id] = true
		}
		h.mu.Unlock()
		return reply{}
	case "logs":
		return reply{"lines": h.logs.lines(cmd.Clear)}
	case "go_plugin":
		return h.startGoPlugin(&cmd)
	case "go_plugin_events":
		p, ok := h.plugins[cmd.Name]
		if !ok {
			return fail(fmt.Errorf("harness: no Go plugin named %q", cmd.Name))
		}
		return reply{"events": p.seen(), "closed": p.isClosed()}
	case "go_plugin_stop":
		p, ok := h.plugins[cmd.Name]
		if !ok {
			return fail(fmt.Errorf("harness: no Go plugin named %q", cmd.Name))
		}
		p.stub.Stop()
		delete(h.plugins, cmd.Name)
		return reply{}
	case "quit":
		h.shutdown()
		return reply{}
	}

	if h.r == nil {
		return fail(fmt.Errorf("harness: op %q needs a started runtime (send start first)", cmd.Op))
	}
	return h.event(&cmd)
}

func (h *harness) start(cmd *command) reply {
	if h.r != nil {
		return fail(errors.New("harness: runtime already started (send stop first)"))
	}
	if cmd.Dir == "" {
		return fail(errors.New("harness: start needs dir"))
	}
	pods, ctrs, err := decodeState(cmd)
	if err != nil {
		return fail(err)
	}
	validate, err := defaultValidatorOption(cmd.DefaultValidator)
	if err != nil {
		return fail(err)
	}
	for _, sub := range []string{"opt/nri/plugins", "etc/nri/conf.d"} {
		if err := os.MkdirAll(filepath.Join(cmd.Dir, sub), 0o755); err != nil {
			return fail(err)
		}
	}
	if cmd.RequestTimeoutMs > 0 {
		adaptation.SetPluginRequestTimeout(time.Duration(cmd.RequestTimeoutMs) * time.Millisecond)
	}
	if cmd.RegistrationTimeoutMs > 0 {
		adaptation.SetPluginRegistrationTimeout(time.Duration(cmd.RegistrationTimeoutMs) * time.Millisecond)
	}
	name, version := cmd.RuntimeName, cmd.RuntimeVersion
	if name == "" {
		name = "containerd"
	}
	if version == "" {
		version = "0.0.0-fake"
	}

	h.mu.Lock()
	h.dir = cmd.Dir
	h.pods, h.ctrs = pods, ctrs
	h.starting = true
	h.startupRec = nil
	h.mu.Unlock()
	// Drop sync records of a previous runtime instance.
	for len(h.syncC) > 0 {
		<-h.syncC
	}

	opts := []adaptation.Option{
		adaptation.WithPluginPath(filepath.Join(cmd.Dir, "opt/nri/plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(cmd.Dir, "etc/nri/conf.d")),
		adaptation.WithSocketPath(filepath.Join(cmd.Dir, "nri.sock")),
	}
	if cmd.DisableExternal {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	}
	if validate != nil {
		opts = append(opts, validate)
	}
	r, err := adaptation.New(name, version, h.syncFn, h.updateFn, opts...)
	if err != nil {
		return fail(err)
	}
	t0 := time.Now()
	err = r.Start()
	elapsed := time.Since(t0).Nanoseconds()
	h.mu.Lock()
	h.starting = false
	startup := h.startupRec
	h.startupRec = nil
	h.mu.Unlock()
	if err != nil {
		r.Stop()
		return reply{"ok": false, "error": err.Error(), "elapsed_ns": elapsed}
	}
	h.r = r
	rpl := reply{"elapsed_ns": elapsed}
	// NRI v0.8+ synchronizes all pre-registered plugins once inside Start
	// (even when there are none); older versions never synchronize them.
	if len(startup) > 0 {
		rec := startup[0]
		s := reply{"updates": encodeList(rec.Updates), "pods": rec.Pods, "containers": rec.Ctrs, "elapsed_ns": rec.ElapsedNs}
		if rec.Err != "" {
			s["error"] = rec.Err
		}
		rpl["startup_sync"] = s
	}
	return rpl
}

func (h *harness) stop() reply {
	if h.r == nil {
		return fail(errors.New("harness: runtime not started"))
	}
	t0 := time.Now()
	h.r.Stop()
	elapsed := time.Since(t0).Nanoseconds()
	h.r = nil
	// Adaptation.Stop closes the listener and kills launched plugins but leaves
	// connections of external plugins open (every version up to v0.12.2). A
	// runtime that stops exits, and the kernel then closes them: do the same.
	closed, err := shutdownAccepted(filepath.Join(h.dir, "nri.sock"))
	if err != nil {
		return fail(err)
	}
	return reply{"elapsed_ns": elapsed, "closed_connections": closed}
}

// shutdownAccepted shuts down every socket of this process accepted on the
// listening socket `path` (their local address is that path; the in-process Go
// plugins' client sockets are unnamed). The fds stay owned by the adaptation.
func shutdownAccepted(path string) (int, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("harness: listing own fds: %w", err)
	}
	closed := 0
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			continue
		}
		if ua, ok := sa.(*syscall.SockaddrUnix); ok && ua.Name == path {
			if syscall.Shutdown(fd, syscall.SHUT_RDWR) == nil {
				closed++
			}
		}
	}
	return closed, nil
}

func (h *harness) shutdown() {
	for name, p := range h.plugins {
		p.stub.Stop()
		delete(h.plugins, name)
	}
	if h.r != nil {
		h.r.Stop()
		h.r = nil
	}
}

// syncFn is what the runtime hands to the adaptation: it reports the current
// pods and containers and records what the plugin(s) answered.
func (h *harness) syncFn(ctx context.Context, cb adaptation.SyncCB) error {
	h.mu.Lock()
	pods, ctrs := h.pods, h.ctrs
	h.mu.Unlock()

	t0 := time.Now()
	updates, err := cb(ctx, pods, ctrs)
	rec := syncRecord{
		Updates:   updates,
		Pods:      len(pods),
		Ctrs:      len(ctrs),
		ElapsedNs: time.Since(t0).Nanoseconds(),
	}
	if err != nil {
		rec.Err = err.Error()
	}
	h.mu.Lock()
	if h.starting {
		h.startupRec = append(h.startupRec, rec)
		h.mu.Unlock()
		return err
	}
	h.mu.Unlock()
	select {
	case h.syncC <- rec:
	default:
		fmt.Fprintln(os.Stderr, "harness: sync record queue full, dropping a record")
	}
	return err
}

func (h *harness) updateFn(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, updates)
	var failed []*api.ContainerUpdate
	for _, u := range updates {
		if h.failIDs[u.ContainerId] {
			failed = append(failed, u)
		}
	}
	return failed, nil
}

func (h *harness) waitSynced(cmd *command) reply {
	timeout := time.Duration(cmd.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	select {
	case rec := <-h.syncC:
		if h.r != nil {
			pluginSyncBarrier(h.r)
		}
		rpl := reply{
			"updates":    encodeList(rec.Updates),
			"pods":       rec.Pods,
			"containers": rec.Ctrs,
			"elapsed_ns": rec.ElapsedNs,
		}
		if rec.Err != "" {
			rpl["ok"] = false
			rpl["error"] = rec.Err
		}
		return rpl
	case <-time.After(timeout):
		return fail(fmt.Errorf("harness: no plugin synchronized within %v", timeout))
	}
}

// event relays one CRI-level request or event to the adaptation.
func (h *harness) event(cmd *command) reply {
	pod := &api.PodSandbox{}
	if err := decodeInto(cmd.Pod, pod, "pod"); err != nil {
		return fail(err)
	}
	ctr := &api.Container{}
	if err := decodeInto(cmd.Container, ctr, "container"); err != nil {
		return fail(err)
	}
	res := &api.LinuxResources{}
	if err := decodeInto(cmd.LinuxResources, res, "linux_resources"); err != nil {
		return fail(err)
	}
	ovh := &api.LinuxResources{}
	if err := decodeInto(cmd.OverheadLinuxResources, ovh, "overhead_linux_resources"); err != nil {
		return fail(err)
	}

	// Like containerd, hold off plugin synchronization while a request is in flight.
	block := blockPluginSync(h.r)
	defer block()

	ctx := context.Background()
	var (
		rsp proto.Message
		err error
	)
	t0 := time.Now()
	switch cmd.Op {
	case "create_container":
		var r *api.CreateContainerResponse
		r, err = h.r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
		rsp = r
	case "update_container":
		var r *api.UpdateContainerResponse
		r, err = h.r.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
		rsp = r
	case "stop_container":
		var r *api.StopContainerResponse
		r, err = h.r.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
		rsp = r
	case "update_pod":
		rsp, err = updatePodSandbox(ctx, h.r, pod, ovh, res)
	case "run_pod", "stop_pod", "remove_pod", "post_update_pod",
		"post_create", "start_container", "post_start", "post_update", "remove_container":
		err = simpleEvent(ctx, h.r, cmd.Op, pod, ctr)
	default:
		return fail(fmt.Errorf("harness: unknown op %q", cmd.Op))
	}
	elapsed := time.Since(t0).Nanoseconds()
	if err != nil {
		return reply{"ok": false, "error": err.Error(), "elapsed_ns": elapsed}
	}
	rpl := reply{"elapsed_ns": elapsed}
	if rsp != nil && !isNil(rsp) {
		rpl["response"] = encode(rsp)
	}
	return rpl
}

func (h *harness) startGoPlugin(cmd *command) reply {
	if h.dir == "" {
		return fail(errors.New("harness: go_plugin needs a started runtime dir"))
	}
	if _, dup := h.plugins[cmd.Name]; dup {
		return fail(fmt.Errorf("harness: Go plugin %q already exists", cmd.Name))
	}
	p, err := newGoPlugin(cmd.Name, cmd.Idx, cmd.Behaviour, cmd.Cpus, cmd.Events)
	if err != nil {
		return fail(err)
	}
	if err := p.start(filepath.Join(h.dir, "nri.sock")); err != nil {
		return fail(err)
	}
	h.plugins[cmd.Name] = p
	return reply{}
}

// ---- encoding helpers ----

var (
	unmarshalOpts = protojson.UnmarshalOptions{}
	marshalOpts   = protojson.MarshalOptions{UseProtoNames: true}
)

func fail(err error) reply { return reply{"ok": false, "error": err.Error()} }

func decodeInto(raw json.RawMessage, msg proto.Message, what string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := unmarshalOpts.Unmarshal(raw, msg); err != nil {
		return fmt.Errorf("harness: cannot decode %s for this NRI version: %w", what, err)
	}
	return nil
}

func decodeState(cmd *command) ([]*api.PodSandbox, []*api.Container, error) {
	pods := make([]*api.PodSandbox, 0, len(cmd.Pods))
	for i, raw := range cmd.Pods {
		p := &api.PodSandbox{}
		if err := decodeInto(raw, p, fmt.Sprintf("pods[%d]", i)); err != nil {
			return nil, nil, err
		}
		pods = append(pods, p)
	}
	ctrs := make([]*api.Container, 0, len(cmd.Containers))
	for i, raw := range cmd.Containers {
		c := &api.Container{}
		if err := decodeInto(raw, c, fmt.Sprintf("containers[%d]", i)); err != nil {
			return nil, nil, err
		}
		ctrs = append(ctrs, c)
	}
	return pods, ctrs, nil
}

func encode(msg proto.Message) json.RawMessage {
	b, err := marshalOpts.Marshal(msg)
	if err != nil {
		panic(fmt.Sprintf("cannot encode %T: %v", msg, err))
	}
	return b
}

func encodeList[T proto.Message](msgs []T) []json.RawMessage {
	list := make([]json.RawMessage, 0, len(msgs))
	for _, m := range msgs {
		list = append(list, encode(m))
	}
	return list
}

func isNil(m proto.Message) bool {
	return m == nil || !m.ProtoReflect().IsValid()
}

func nriModuleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == "github.com/containerd/nri" {
			if dep.Replace != nil {
				return dep.Replace.Version
			}
			return dep.Version
		}
	}
	return "unknown"
}

func goVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		return info.GoVersion
	}
	return "unknown"
}

// ---- in-memory log ----

type memLog struct {
	mu  sync.Mutex
	buf []string
}

func (l *memLog) add(level, format string, args ...interface{}) {
	line := level + ": " + fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, line)
	l.mu.Lock()
	l.buf = append(l.buf, line)
	if len(l.buf) > 20000 {
		l.buf = l.buf[len(l.buf)-10000:]
	}
	l.mu.Unlock()
}

func (l *memLog) lines(clear bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string{}, l.buf...)
	if clear {
		l.buf = nil
	}
	return out
}

func (l *memLog) Debugf(_ context.Context, format string, args ...interface{}) {
	l.add("debug", format, args...)
}
func (l *memLog) Infof(_ context.Context, format string, args ...interface{}) {
	l.add("info", format, args...)
}
func (l *memLog) Warnf(_ context.Context, format string, args ...interface{}) {
	l.add("warn", format, args...)
}
func (l *memLog) Errorf(_ context.Context, format string, args ...interface{}) {
	l.add("error", format, args...)
}
