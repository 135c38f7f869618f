{{/*
The reset container (uninstall.resetContainers): a second container in the daemon's pod
that un-pins every container on the node when its pod stops, but only when the DaemonSet
is being removed (helm uninstall), never on a rolling update or a pod deletion. The work
runs in its preStop hook: on containerd the CRI StopContainer of this very container would
hold NRI's plugin synchronization until it has exited, so a reset after SIGTERM could
never synchronize; the hook runs before that stop. The main process records the
DaemonSet's UID at start-up in the hand-off emptyDir and, on SIGTERM, prints the hook's
report. The hook waits until the daemon's HTTP port is closed (the daemon has exited)
before resetting, so the daemon cannot re-pin afterwards. See docs/operations.md,
"Uninstall". It mirrors the daemon's socket, sysfs, state and resctrl mounts and options,
so it finds the same runtime, the same online CPUs and the daemon's record of its groups.
*/}}
{{- define "nri-resmgr.resetArgs" -}}
- reset
- --on-uninstall={{ .Release.Namespace }}/{{ include "nri-resmgr.fullname" . }}
- --handoff-dir=/run/nri-resmgr-reset
- --wait-port=127.0.0.1:{{ .Values.instrumentation.httpPort }}
- --socket={{ .Values.hostPaths.nriSocketDir }}/nri.sock
- --sysfs-root=/host
- --state-dir={{ .Values.stateDir }}
- --timeout={{ .Values.uninstall.timeout }}
{{- if not .Values.control.rdt.enable }}
- --no-resctrl
{{- end }}
{{- end -}}
{{- define "nri-resmgr.resetContainer" -}}
{{- if .Values.uninstall.resetContainers }}
- name: reset-on-uninstall
  image: {{ include "nri-resmgr.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    {{- include "nri-resmgr.resetArgs" . | nindent 4 }}
  lifecycle:
    preStop:
      exec:
        command:
          - /opt/nri-resmgr/bin/nri-resmgr
          {{- include "nri-resmgr.resetArgs" . | nindent 10 }}
          - --prestop
  resources:
    {{- toYaml .Values.uninstall.resources | nindent 4 }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
      {{- if include "nri-resmgr.needsControl" . }}
      add: ["SYS_ADMIN", "DAC_OVERRIDE"]
      {{- end }}
  volumeMounts:
    - name: nri-socket
      mountPath: {{ .Values.hostPaths.nriSocketDir }}
    - name: sys
      mountPath: /host/sys
      readOnly: true
    - name: state
      mountPath: {{ .Values.stateDir }}
    - name: reset-handoff
      mountPath: /run/nri-resmgr-reset
    {{- if .Values.control.rdt.enable }}
    - name: resctrl
      mountPath: /host/sys/fs/resctrl
    {{- end }}
{{- end }}
{{- end -}}
