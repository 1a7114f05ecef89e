# shellcheck shell=bash
# ensure_venv DIR REQUIREMENTS [LABEL]: a Python virtual environment at DIR with the exact
# versions of REQUIREMENTS, installed again only when that file changed (a copy of the file
# installed last is kept beside it). The one way the project makes a venv: the QR host's
# (scripts/build-qr.sh) and the test apps' (scripts/setup.sh).
ensure_venv() {
  local venv="$1" req="$2" label="${3:-$2}"
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "venv: creating $venv ($label)"
    python3 -m venv "$venv"
  fi
  if ! cmp -s "$req" "$venv/requirements.installed"; then
    echo "venv: installing $req into $venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$venv/requirements.installed"
  fi
}
