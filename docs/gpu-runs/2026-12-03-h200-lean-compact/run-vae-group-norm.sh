#!/usr/bin/env bash
# On the H200: the VAE with onnxruntime's GroupNorm (scripts/vae_group_norm.py's copy of the filled repository: its
# VAE graph files and manifest, the weights linked) against the exported VAE, both on onnxruntime-web 1.31.1.
set -uo pipefail
source .h200/xe/env.sh
[ -d /tmp/dist-131 ] || tar -C /tmp -xJf .h200/xe/dist-131.tar.xz
if [ ! -d /tmp/full ]; then
  tar -C /tmp -xJf /tmp/stage/structure.tar.xz
  python3 scripts/weightless_repo.py fill /tmp/structure /tmp/full --seed 0 2>&1 | tail -1
fi
if [ ! -d /tmp/gn ]; then
  cp -al /tmp/full /tmp/gn
  (cd .h200/xg/gn && find . -type f) | while read -r f; do rm -f "/tmp/gn/$f"; cp ".h200/xg/gn/$f" "/tmp/gn/$f"; done
fi
{ $CHR --version; nvidia-smi -L; date -u; } > $OUT/versions.txt 2>&1
for repo in gn full; do
  timeout 200 python3 -m builder browser-bench --gpu --browser $CHR --models /tmp/$repo --dist /tmp/dist-131 \
     --precision q4f16 --sizes 1024x1024 --memory fast --out $OUT/vae-$repo > $OUT/vae-$repo.log 2>&1
  echo "vae-$repo exit $?" | tee -a $OUT/versions.txt
  grep "^| q4f16" $OUT/vae-$repo/browser-bench.md 2>/dev/null || tail -5 $OUT/vae-$repo.log
done
