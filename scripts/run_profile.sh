#!/usr/bin/env bash
# Run the study with another parameters file, in a scratch copy of the repository.
#   scripts/run_profile.sh PROFILE.yaml DIR [--plain]
# DIR receives the tracked (and untracked, non-ignored) files of this checkout,
# PROFILE as its params.yaml, the dvc.yaml generated for it, and a git repository of
# its own. The study runs through the study flow (flows/study.py, stages concurrently),
# or with --plain through `dvc repro` alone.
set -euo pipefail
profile=$1
dest=$2
mode=${3:-flow}
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dest"
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' | tar --null -cf - -T -) | tar -xf - -C "$dest"
cp "$profile" "$dest/params.yaml"
# The checkout's own study outputs (git-tracked metrics, curves, reports) are not this profile's.
rm -rf "$dest/dvc.lock" "$dest/metrics" "$dest/plots" "$dest/reports"
cd "$dest"
aligntrain pipeline
git init -q
git add -A
git -c user.name=aligntrain -c user.email=aligntrain@localhost commit -qm "profile $(basename "$profile")"
start=$(date +%s)
if [ "$mode" = "--plain" ]; then
    "$src/scripts/plain_repro.sh"
else
    python "$dest/flows/study.py" --root "$dest"
fi
echo "profile $(basename "$profile"): $mode took $(( $(date +%s) - start )) s in $dest"
