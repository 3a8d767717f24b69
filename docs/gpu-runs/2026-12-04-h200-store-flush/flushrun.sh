#!/usr/bin/env bash
# hash_bench --store on the H200 with the partial copy flushed every 16 MiB, 256 MiB, and only at the end.
set -uo pipefail
source scripts/gpu/env.sh
CHR=$KLEIN_CHROMIUM
{ $CHR --version; nproc; df -h /tmp | tail -1; mount | grep " / " ; } > $OUT/env.txt 2>&1
for v in "16 * 1024 * 1024" "256 * 1024 * 1024" "16 * 1024 * 1024" "4096 * 1024 * 1024" "256 * 1024 * 1024"; do
  sed -i "s/^const FLUSH_EVERY_BYTES = .*;/const FLUSH_EVERY_BYTES = $v;/" web_src/src/store/partial_copy.js
  echo "== FLUSH_EVERY_BYTES = $v" >> $OUT/flush.txt
  timeout 150 python3 scripts/hash_bench.py --store >> $OUT/flush.txt 2>&1
  echo "exit $?" >> $OUT/flush.txt
done
cat $OUT/flush.txt | grep -v "^hashing"
