#!/usr/bin/env bash
# Re-vendors the JavaScript that `worldgraph view` inlines into its page (no CDN: the page must
# work offline) from the npm registry: cytoscape.js and the fCoSE layout with its two bases.
# Bump a version below, run this script, look at the page (tests/live/test_view_browser.py), commit.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=worldgraph/server/view_assets
PACKAGES=(
  "cytoscape@3.35.0:dist/cytoscape.min.js:cytoscape.min.js"
  "layout-base@2.0.1:layout-base.js:layout-base.js"
  "cose-base@2.2.0:cose-base.js:cose-base.js"
  "cytoscape-fcose@2.2.0:cytoscape-fcose.js:cytoscape-fcose.js"
)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

{
  echo "# Vendored JavaScript of the world-graph page"
  echo
  echo "\`worldgraph view\` and \`GET /v1/envs/{env}/view\` inline these files into one self-contained"
  echo "HTML page. They come unchanged from the npm registry; \`scripts/vendor_view_js.sh\` fetches them"
  echo "again. Each is MIT-licensed; its licence file sits beside it (\`<package>.LICENSE\`)."
  echo
  echo "| file | npm package | version | tarball integrity |"
  echo "|---|---|---|---|"
} > "$TMP/NOTICE.md"

for spec in "${PACKAGES[@]}"; do
  IFS=: read -r pkg src out <<< "$spec"
  name=${pkg%@*}
  (cd "$TMP" && npm pack --silent "$pkg" > /dev/null)
  tgz=$(ls "$TMP"/"${name}"-*.tgz)
  mkdir -p "$TMP/$name"
  tar xzf "$tgz" -C "$TMP/$name"
  if grep -qi -e '</script' -e '<!--' "$TMP/$name/package/$src"; then
    echo "$pkg: $src contains '</script' or '<!--' and cannot be inlined into a <script> element" >&2
    exit 1
  fi
  cp "$TMP/$name/package/$src" "$DEST/$out"
  cp "$TMP/$name/package/LICENSE" "$DEST/$name.LICENSE"
  integrity=$(npm view "$pkg" dist.integrity)
  echo "| \`$out\` | [$name](https://www.npmjs.com/package/$name) | ${pkg#*@} | \`$integrity\` |" >> "$TMP/NOTICE.md"
  rm -f "$tgz"
done
cp "$TMP/NOTICE.md" "$DEST/NOTICE.md"
echo "vendored into $DEST:"
ls -l "$DEST"
