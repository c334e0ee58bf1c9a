#!/usr/bin/env bash
# Run the study's dvc.yaml with another parameters file, in a scratch copy of the repository.
#   scripts/run_profile.sh PROFILE.yaml DIR
# DIR receives the tracked (and untracked, non-ignored) files of this checkout,
# PROFILE as its params.yaml, a git repository of its own, and runs `dvc repro`.
set -euo pipefail
profile=$1
dest=$2
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dest"
mkdir -p "$dest"
(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' | tar --null -cf - -T -) | tar -xf - -C "$dest"
cp "$profile" "$dest/params.yaml"
# The checkout's own study outputs (git-tracked metrics, curves, reports) are not this profile's.
rm -rf "$dest/dvc.lock" "$dest/metrics" "$dest/plots" "$dest/reports"
cd "$dest"
git init -q
git add -A
git -c user.name=aligntrain -c user.email=aligntrain@localhost commit -qm "profile $(basename "$profile")"
start=$(date +%s)
ALIGNTRAIN_PARENT_RUN_ID=$(aligntrain new-study-run) dvc repro
echo "profile $(basename "$profile"): dvc repro took $(( $(date +%s) - start )) s in $dest"
