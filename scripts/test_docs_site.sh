#!/usr/bin/env bash
# The documentation site's tier: set up (scripts/setup.sh), add the docs extra to the same
# virtualenv at the versions of its constraints file, then `mkdocs build --strict` into a
# temporary folder. Strict: any warning fails, e.g. a link to a page, heading or
# repository file that does not exist, or an API reference entry that names no object.
# The site is not kept (`mkdocs serve` to browse it, `mkdocs build` for site/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
venv=${VENV:-.venv}
constraints=$(cat "$venv/.fedram-installed")  # the Flower line setup.sh installed
stamp=$venv/.fedram-docs-installed
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$constraints" ] \
   || [ pyproject.toml -nt "$stamp" ] || [ "$constraints" -nt "$stamp" ]; then
  echo "docs: installing the docs extra into $venv" >&2
  "$venv/bin/pip" install -q -c "$constraints" -e '.[docs]'
  echo "$constraints" > "$stamp"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$SECONDS
NO_MKDOCS_2_WARNING=1 "$venv/bin/mkdocs" build --strict --site-dir "$out/site"
echo "docs: mkdocs build --strict passed in $((SECONDS - start)) s" >&2
