#!/bin/sh
# Install a Python plugin as a pre-registered NRI plugin: write an executable launcher
# DIR/IDX-NAME that the runtime starts with the socket on fd 3, stdout/stderr discarded and
# an environment of only NRI_PLUGIN_NAME/IDX/SOCKET (no PATH, no PYTHONPATH). So the
# launcher names the interpreter and the script by absolute path, sets PYTHONPATH to where
# nri_api lives, and sends the log to a file.
#
# usage: install-preregistered.sh SCRIPT.py IDX [PLUGIN_DIR [LOG_FILE]]
#        (PYTHON=/path/to/python3 to choose the interpreter; default: python3 on PATH)
set -eu
[ $# -ge 2 ] || { echo "usage: $0 SCRIPT.py IDX [PLUGIN_DIR [LOG_FILE]]" >&2; exit 2; }
script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
idx=$2
dir=${3:-/opt/nri/plugins}
name=$(basename "$script" .py | tr _ -)
log=${4:-/var/log/nri-plugin-$idx-$name.log}
python=${PYTHON:-$(command -v python3)}
case $python in /*) ;; *) python=$(pwd)/$python ;; esac
libdir=$("$python" -c 'import nri_api, os; print(os.path.dirname(os.path.dirname(nri_api.__file__)))')
launcher=$dir/$idx-$name
mkdir -p "$dir"
cat > "$launcher" <<LAUNCHER
#!/bin/sh
PYTHONPATH='$libdir' exec '$python' '$script' --log-file '$log' "\$@"
LAUNCHER
chmod 0755 "$launcher"
echo "$launcher"
