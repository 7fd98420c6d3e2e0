# Sourced by scripts/broker and scripts/test: make .venv (Python 3.11+) and install the
# project with the given extras, pinned by constraints.txt, when pyproject.toml,
# constraints.txt or the set of files under the packages changed since the last install.
# The install is editable and strict: the folders broker/, protocol/, assignors/ and
# pipeline/ appear as kgroupd.broker, ... through links under build/, which mypy follows
# too; a file added or removed there needs the links made again (this script does it).
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
want="$( (cat pyproject.toml constraints.txt
  find broker protocol assignors pipeline -not -path '*/__pycache__*' | LC_ALL=C sort) |
  sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  PYTHONWARNINGS=ignore .venv/bin/python -m pip install --quiet -c constraints.txt \
    --config-settings editable_mode=strict -e ".${extras:+[$extras]}"
  echo "$want" > "$stamp"
fi
