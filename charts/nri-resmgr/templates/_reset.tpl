{{/*
The reset container (uninstall.resetContainers): a second container in the daemon's pod
that waits for SIGTERM, then un-pins every container on the node, but only when the
DaemonSet is being removed (helm uninstall), never on a rolling update or a pod deletion.
It waits until the daemon's HTTP port is closed (the daemon has exited) before resetting,
so the daemon cannot re-pin afterwards. See docs/operations.md, "Uninstall".
It mirrors the daemon's socket, sysfs, state and resctrl mounts and options, so it finds
the same runtime, the same online CPUs and the daemon's record of its resctrl groups.
*/}}
{{- define "nri-resmgr.resetContainer" -}}
{{- if .Values.uninstall.resetContainers }}
- name: reset-on-uninstall
  image: {{ include "nri-resmgr.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - reset
    - --on-uninstall={{ .Release.Namespace }}/{{ include "nri-resmgr.fullname" . }}
    - --wait-port=127.0.0.1:{{ .Values.instrumentation.httpPort }}
    - --socket={{ .Values.hostPaths.nriSocketDir }}/nri.sock
    - --sysfs-root=/host
    - --state-dir={{ .Values.stateDir }}
    - --timeout={{ .Values.uninstall.timeout }}
    {{- if not .Values.control.rdt.enable }}
    - --no-resctrl
    {{- end }}
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
    {{- if .Values.control.rdt.enable }}
    - name: resctrl
      mountPath: /host/sys/fs/resctrl
    {{- end }}
{{- end }}
{{- end -}}
