# Sourced by scripts/demo and scripts/test: make or reuse the clone's virtual
# environment (.venv, ignored by git) and install mediaflow into it, editable,
# with the extras asked for. Works with a distribution's own python3 (PEP 668:
# nothing is installed system-wide) as with any other Python 3.11+.
#
#   ensure_venv EXTRAS     e.g. ensure_venv "" or ensure_venv "test"
#
# Sets VENV_PYTHON. Reinstalls only when pyproject.toml or the extras changed
# since the last install (a stamp file in .venv); MEDIAFLOW_REINSTALL=1 forces it.

VENV_DIR=${MEDIAFLOW_VENV:-.venv}

venv_fail() {
  echo "$0: $*" >&2
  exit 1
}

ensure_venv() {
  local extras=$1 python=${PYTHON:-python3}
  command -v "$python" >/dev/null 2>&1 || venv_fail "no $python on PATH; install Python 3.11 or newer"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || venv_fail "$("$python" --version 2>&1) is too old; mediaflow needs Python 3.11 or newer"
  if [ ! -x "$VENV_DIR/bin/python" ] || ! "$VENV_DIR/bin/python" -m pip --version >/dev/null 2>&1; then
    echo "creating the virtual environment $VENV_DIR with $("$python" --version 2>&1)"
    rm -rf "$VENV_DIR"
    if ! "$python" -m venv "$VENV_DIR"; then
      rm -rf "$VENV_DIR"
      venv_fail "$python cannot make a virtual environment; on Debian or Ubuntu: sudo apt-get install python3-venv"
    fi
    "$VENV_DIR/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
  fi
  VENV_PYTHON=$VENV_DIR/bin/python
  local target=. stamp_file=$VENV_DIR/.mediaflow-install stamp
  [ -z "$extras" ] || target=".[$extras]"
  stamp="$(sha256sum pyproject.toml | cut -d' ' -f1) $target"
  local installed
  installed=$(cat "$stamp_file" 2>/dev/null || true)
  # Any install from this pyproject.toml serves the plain package; an extra needs its own.
  [ -n "$extras" ] || installed="${installed%% *} $target"
  if [ "${MEDIAFLOW_REINSTALL:-0}" = 1 ] || [ "$installed" != "$stamp" ]; then
    echo "installing mediaflow${extras:+ with [$extras]} into $VENV_DIR (once; a minute or two)"
    "$VENV_PYTHON" -m pip install -q --disable-pip-version-check -e "$target" \
      || venv_fail "pip could not install mediaflow into $VENV_DIR (see above)"
    echo "$stamp" >"$stamp_file"
  fi
}
