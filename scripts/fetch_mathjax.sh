#!/usr/bin/env bash
# Put a MathJax 3.2.2 subset under book/_extra/mathjax so the built book typesets offline.
# Source: the npm registry package `mathjax` (npm pack), cached in .cache/.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=book/_extra/mathjax
[ -f "$dest/tex-mml-chtml.js" ] && exit 0
mkdir -p .cache
tarball=.cache/mathjax-3.2.2.tgz
if [ ! -f "$tarball" ]; then
  command -v npm >/dev/null || { echo "fetch_mathjax: npm is needed once to fetch MathJax 3.2.2" >&2; exit 1; }
  (cd .cache && npm pack --silent mathjax@3.2.2 >/dev/null)
fi
tmp=$(mktemp -d)
tar -xzf "$tarball" -C "$tmp"
mkdir -p "$dest/output/chtml" "$dest/input/tex"
cp "$tmp/package/es5/tex-mml-chtml.js" "$dest/"
cp -r "$tmp/package/es5/output/chtml/fonts" "$dest/output/chtml/"
cp -r "$tmp/package/es5/input/tex/extensions" "$dest/input/tex/"
for d in a11y ui sre; do cp -r "$tmp/package/es5/$d" "$dest/"; done
cp "$tmp/package/LICENSE" "$dest/LICENSE"
rm -rf "$tmp"
echo "fetch_mathjax: MathJax 3.2.2 ($(du -sh "$dest" | cut -f1)) in $dest"
