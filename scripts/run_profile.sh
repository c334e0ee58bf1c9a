#!/usr/bin/env bash
# Run the study with another parameters file, in a scratch copy of the repository.
#   scripts/run_profile.sh PROFILE.yaml DIR [--plain]
# DIR receives the tracked (and untracked, non-ignored) files of this checkout,
# PROFILE as its params.yaml, the dvc.yaml generated for it, and a git repository of
# its own. The study runs through the study flow (flows/study.py, stages concurrently),
# or with --plain through `dvc repro` alone.
# DIR must be new, empty, or a folder an earlier run of this script made (it holds
# .aligntrain-scratch); anything else is refused before anything is touched.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
    echo "usage: scripts/run_profile.sh PROFILE.yaml DIR [--plain]" >&2
    exit 2
fi
profile=$1
dest=$2
mode=${3:-flow}
mark=.aligntrain-scratch
if [ "$mode" != flow ] && [ "$mode" != --plain ]; then
    echo "error: the third argument is --plain or nothing, got '$mode'; nothing was changed" >&2
    exit 2
fi
if [ ! -f "$profile" ]; then
    echo "error: profile $profile: no such file; nothing was changed" >&2
    exit 2
fi
profile=$(cd "$(dirname "$profile")" && pwd)/$(basename "$profile")
if [ -e "$dest" ] && [ ! -d "$dest" ]; then
    echo "error: $dest exists and is not a folder; nothing was changed" >&2
    exit 2
fi
if [ -d "$dest" ] && [ -n "$(ls -A "$dest")" ] && [ ! -f "$dest/$mark" ]; then
    echo "error: $dest holds files that scripts/run_profile.sh did not write (no $mark);" \
        "give a new or empty folder. Nothing was deleted." >&2
    exit 2
fi
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dest"
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
echo "made by scripts/run_profile.sh: emptied by its next run" > "$dest/$mark"
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
