#!/usr/bin/env bash
# Does the GPU environment's package set resolve? (docs/gpu.md, "The check")
#
#   scripts/check_gpu_env.sh            resolve pyproject's dependencies + [gpu,test] under
#                                       constraints-gpu.txt and check the result
#   scripts/check_gpu_env.sh --freeze   resolve them without constraints-gpu.txt and rewrite it
#
# No GPU and no install: pip's resolver runs with --dry-run and writes a JSON report. Wheels are
# never downloaded whole: pip reads their metadata (PEP 658 files where the index serves them,
# otherwise HTTP range requests into the wheel, --use-feature=fast-deps). Source-only packages
# (deepspeed) are downloaded (a few MB) to build their metadata.
#
# pip runs --isolated: no pip.conf, no PIP_* variables. A machine's pip configuration may add a
# find-links folder or an extra index holding a CPU build of torch (2.13.0+cpu sorts above 2.13.0
# and satisfies ==2.13.0) or a global constraint file; the GPU set must resolve against the
# index alone, where torch 2.13.0 for Linux is the CUDA build. Only PIP_CERT (a CA bundle) is
# passed on. GPU_INDEX_URL replaces pip's default index (PyPI), e.g. with a mirror of it.
#
# The set is a freeze for CPython 3.11 on Linux x86_64, the interpreter the Makefile builds
# .venv-gpu with (it also resolved unchanged for 3.12 when written). PYTHON picks the
# interpreter whose pip resolves (default: .venv's, else python3.11).
# Exit status: 0 resolves and checks out, 1 does not, 77 the index is unreachable.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=check
case "${1:-}" in
  "") ;;
  --freeze) mode=freeze ;;
  *) echo "usage: $0 [--freeze]" >&2; exit 2 ;;
esac

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python
  elif command -v python3.11 >/dev/null; then PYTHON=python3.11
  else PYTHON=python3
  fi
fi
CONSTRAINTS=constraints-gpu.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
report=${GPU_CHECK_REPORT:-$work/report.json}

pip=("$PYTHON" -m pip --isolated)
[[ -n "${PIP_CERT:-}" ]] && pip+=(--cert "$PIP_CERT")
index=()
[[ -n "${GPU_INDEX_URL:-}" ]] && index=(--index-url "$GPU_INDEX_URL")

"$PYTHON" - <<'EOF'
import platform, sys
if sys.version_info[:2] != (3, 11) or platform.system() != "Linux" or platform.machine() != "x86_64":
    print(f"check_gpu_env: warning: resolving for Python {platform.python_version()} on "
          f"{platform.system()} {platform.machine()}; the set is made for CPython 3.11 on Linux x86_64",
          file=sys.stderr)
EOF

if ! "${pip[@]}" index versions pip "${index[@]}" --timeout 15 --retries 1 >/dev/null 2>"$work/probe.err"; then
  echo "SKIP: the package index is unreachable (pip index versions pip failed: $(tail -1 "$work/probe.err"))"
  exit 77
fi

# The top-level requirements: pyproject's dependencies and the gpu and test extras, never
# orchestration (Prefect: fastapi >= 0.139 against vLLM's < 0.137).
"$PYTHON" - "$work/requirements.txt" <<'EOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
with open(sys.argv[1], "w") as out:
    out.write("\n".join(project["dependencies"] + extras["gpu"] + extras["test"]) + "\n")
EOF

if [[ $mode == check ]]; then
  pins=(-c "$CONSTRAINTS")
else
  # vLLM 0.31 asks for setuptools < 81 on Python > 3.11; pinning below 81 keeps the freeze
  # usable there too.
  echo "setuptools<81" >"$work/hints.txt"
  pins=(-c "$work/hints.txt")
fi

start=$SECONDS
if ! "${pip[@]}" install --dry-run --ignore-installed --progress-bar off --use-feature=fast-deps "${index[@]}" \
    --report "$report" -r "$work/requirements.txt" "${pins[@]}" >"$work/pip.log" 2>&1; then
  grep -v -E "^ *(Collecting|Obtaining dependency|Downloading|Installing build|Getting requirements|Preparing metadata)|fast-deps" \
    "$work/pip.log" | tail -40 >&2
  echo "FAIL: the GPU set does not resolve (pip's messages above)" >&2
  exit 1
fi
echo "resolved in $((SECONDS - start)) s"

"$PYTHON" - "$report" "$CONSTRAINTS" "$mode" <<'EOF'
"""Check pip's report: the CUDA torch from the index, the pins docs/gpu.md explains, no Prefect;
in check mode also that constraints-gpu.txt pins every package resolved, at the version resolved."""
import json, re, sys

try:
    from packaging.version import Version
except ImportError:  # pip's own copy
    from pip._vendor.packaging.version import Version

report_path, constraints_path, mode = sys.argv[1:]
report = json.load(open(report_path))
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
resolved = {canon(i["metadata"]["name"]): i for i in report["install"]}
version = {name: i["metadata"]["version"] for name, i in resolved.items()}
problems = []

torch = resolved.get("torch")
if torch is None:
    problems.append("torch is not in the set")
else:
    url = torch["download_info"]["url"]
    needs = " ".join(torch["metadata"].get("requires_dist", []))
    if Version(version["torch"]).local or url.startswith("file:") or "cuda" not in needs.lower():
        problems.append(f"torch {version['torch']} from {url} is not the index's CUDA build")
    elif version["torch"] != "2.13.0":
        problems.append(f"torch {version['torch']}, not 2.13.0")
expect = {
    "vllm": lambda v: v == Version("0.31.0"),
    "transformers": lambda v: Version("5.10.4") <= v < Version("5.18"),
    "trl": lambda v: Version("1.16") <= v < Version("1.17"),
    "fastapi": lambda v: v < Version("0.137"),
}
for name, ok in expect.items():
    if name not in version:
        problems.append(f"{name} is not in the set")
    elif not ok(Version(version[name])):
        problems.append(f"{name} {version[name]} is outside the range docs/gpu.md gives")
for name in ("peft", "bitsandbytes", "deepspeed"):
    if name not in version:
        problems.append(f"{name} is not in the set")
if "prefect" in version:
    problems.append(f"prefect {version['prefect']} is in the set (the orchestration extra stays out)")

if mode == "check":
    pinned = {}
    for line in open(constraints_path):
        line = line.split("#")[0].strip()
        if line:
            name, _, pin = line.partition("==")
            pinned[canon(name)] = pin.strip()
    for name, v in sorted(version.items()):
        if pinned.get(name) != v:
            problems.append(f"{name} {v} resolved, but {constraints_path} pins {pinned.get(name, 'nothing')}")
else:
    with open(constraints_path, "w") as out:
        out.write(
            "# The GPU compute environment (`make venv-gpu`, docs/gpu.md): exact versions for CPython 3.11 on\n"
            "# Linux x86_64. torch==2.13.0 is the index's default Linux wheel, the CUDA build. Written by\n"
            "# `scripts/check_gpu_env.sh --freeze` from pyproject.toml's dependencies + [gpu,test]; checked by\n"
            "# `make check-gpu-env`. No Prefect here (the orchestration extra): see docs/gpu.md.\n"
        )
        for name in sorted(version):
            out.write(f"{resolved[name]['metadata']['name']}=={version[name]}\n")
    print(f"wrote {constraints_path}: {len(version)} packages")

if problems:
    print("FAIL:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
keys = " ".join(f"{n}=={version[n]}" for n in ("torch", "vllm", "transformers", "trl", "fastapi") if n in version)
print(f"OK: {len(version)} packages resolve together ({keys}; torch is the CUDA build; no prefect)")
EOF
