#!/usr/bin/env bash
# Puts Multi30k (task 1: train, val, test_2016_flickr, test_2017_flickr; de and en, gzipped)
# under data/multi30k/. Copies from ../shared/data/multi30k/ when present (offline machines),
# otherwise downloads the raw files from the public Multi30k repository. Verifies line counts.
#
#   tools/get_data.sh            # into data/multi30k/
#   MULTI30K_DIR=/path tools/get_data.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${MULTI30K_DIR:-$root/data/multi30k}
shared=${MULTI30K_SHARED:-$root/../shared/data/multi30k}
base_url=${MULTI30K_URL:-https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw}

declare -A expected=([train]=29000 [val]=1014 [test_2016_flickr]=1000 [test_2017_flickr]=1000)
splits=(train val test_2016_flickr test_2017_flickr)

mkdir -p "$dest"
for split in "${splits[@]}"; do
  for lang in de en; do
    name=$split.$lang.gz
    if [[ -s $dest/$name ]]; then
      continue
    elif [[ -s $shared/$name ]]; then
      cp "$shared/$name" "$dest/$name.part"
    elif [[ -s $shared/$split.$lang ]]; then
      gzip -c "$shared/$split.$lang" > "$dest/$name.part"
    else
      echo "downloading $name"
      if command -v curl > /dev/null; then
        curl -fsSL --retry 3 -o "$dest/$name.part" "$base_url/$name"
      else
        wget -q -O "$dest/$name.part" "$base_url/$name"
      fi
    fi
    chmod 644 "$dest/$name.part"  # a read-only shared copy must not make ours read-only
    mv "$dest/$name.part" "$dest/$name"
  done
done

# Counts: each split must have its published size on both sides, or nothing downstream is aligned.
status=0
for split in "${splits[@]}"; do
  for lang in de en; do
    n=$(gzip -dc "$dest/$split.$lang.gz" | wc -l)
    if [[ $n -ne ${expected[$split]} ]]; then
      echo "error: $dest/$split.$lang.gz has $n lines, expected ${expected[$split]}" >&2
      status=1
    fi
  done
done
[[ $status -eq 0 ]] && echo "Multi30k ready in $dest (train 29000, val 1014, test_2016_flickr 1000, test_2017_flickr 1000)"
exit $status
