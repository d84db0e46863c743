#!/usr/bin/env bash
# Put every repository of the real-world manifest, at its commit, under DIR as
# DIR/owner__name@commit10/ (its Python files).
#
#   tests/realworld/checkout.sh DIR                  # clone from GitHub (network)
#   tests/realworld/checkout.sh DIR --mirror MIRROR  # no network: local bare repositories
#
# MIRROR holds one bare git repository per project, found as the first of
#   MIRROR/owner+name/repo   MIRROR/owner__name.git   MIRROR/owner/name.git
# (make one with `git clone --mirror https://github.com/owner/name MIRROR/owner__name.git`).
# Folders that already exist are kept.  Manifests read: cases.jsonl and cases-b.jsonl
# next to this script (or the files named in $MANIFESTS).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:?usage: checkout.sh DIR [--mirror MIRROR]}"
mirror=""
if [[ "${2:-}" == "--mirror" ]]; then mirror="${3:?--mirror needs a folder}"; fi
manifests="${MANIFESTS:-$here/cases.jsonl $here/cases-b.jsonl}"
mkdir -p "$dir"
keep=(':(glob)**/*.py')  # dplint reads only Python files (no public repository configures dplint)

pairs() {
  for m in $manifests; do [[ -f "$m" ]] && cat "$m"; done | python3 -c '
import json, sys
seen = set()
for line in sys.stdin:
    if line.strip():
        row = json.loads(line)
        pair = (row["repo"], row["commit"])
        if pair not in seen:
            seen.add(pair)
            print(*pair)
'
}

export_commit() {  # git dir, commit, target folder
  mkdir -p "$3.part"
  # git archive refuses a tree whose large blobs a partial snapshot lacks: then copy file by file
  if ! git --git-dir "$1" archive "$2" -- "${keep[@]}" 2>/dev/null | tar -x -C "$3.part" 2>/dev/null; then
    git --git-dir "$1" ls-tree -r -z --name-only "$2" | grep -z '\.py$' |
      while IFS= read -r -d '' path; do
        mkdir -p "$3.part/$(dirname "$path")"
        git --git-dir "$1" cat-file blob "$2:$path" > "$3.part/$path" || return 1
      done || return 1
  fi
  mv "$3.part" "$3"
}

failed=0
while read -r repo commit; do
  target="$dir/${repo/\//__}@${commit:0:10}"
  [[ -d "$target" ]] && continue
  if [[ -n "$mirror" ]]; then
    gitdir=""
    for candidate in "$mirror/${repo/\//+}/repo/.git" "$mirror/${repo/\//+}/repo" "$mirror/${repo/\//__}.git" "$mirror/$repo.git"; do
      if [[ -d "$candidate" ]]; then gitdir="$candidate"; break; fi
    done
    if [[ -z "$gitdir" ]] || ! export_commit "$gitdir" "$commit" "$target"; then
      echo "missing: $repo $commit" >&2; rm -rf "$target.part"; failed=1
    fi
  else
    work="$(mktemp -d)"
    if git clone -q --filter=blob:none --no-checkout "https://github.com/$repo" "$work/r" \
        && git -C "$work/r" checkout -q "$commit" \
        && export_commit "$work/r/.git" "$commit" "$target"; then :; else
      echo "missing: $repo $commit" >&2; rm -rf "$target.part"; failed=1
    fi
    rm -rf "$work"
  fi
done < <(pairs)
exit "$failed"
