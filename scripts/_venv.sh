# Sourced by scripts/broker and scripts/test: make .venv (Python 3.11+) and install the
# project with the given extras, pinned by constraints.txt, when pyproject.toml or
# constraints.txt changed since the last install.
# Usage: . scripts/_venv.sh EXTRAS   ("" for none: always pass it, or a sourced script
# would see the caller's own arguments as $1)
set -euo pipefail
extras="$1"
py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "kgroupd needs Python 3.11 or newer as '$py' (set PYTHON=...)" >&2
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
stamp=".venv/.installed${extras:+-$extras}"
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install --quiet -c constraints.txt -e ".${extras:+[$extras]}"
  echo "$want" > "$stamp"
fi
