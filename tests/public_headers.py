#!/usr/bin/env python3
"""The installed API is include/torchmt/ and nothing else: every quoted #include of a public header
names another public header (torchmt/...), so `cmake --install`'s tree compiles on its own, and
the headers that embedding programs, the example and the Python module start from are there.

    public_headers.py SOURCE_DIR
Exit 0 when the API is closed; prints each offending include otherwise.
"""
import os
import re
import sys

root = os.path.join(sys.argv[1], "include")
entry_points = ["torchmt/decoding/translator.h", "torchmt/loading/model_loader.h",
                "torchmt/serving/translation_service.h", "torchmt/training/trainer.h",
                "torchmt/evaluation/bleu.h", "torchmt/evaluation/chrf.h", "torchmt/kernels/runtime.h"]
problems = [f"{h}: missing from include/" for h in entry_points if not os.path.isfile(os.path.join(root, h))]
count = 0
for folder, _, files in os.walk(root):
    for name in files:
        path = os.path.join(folder, name)
        count += 1
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m and not (m.group(1).startswith("torchmt/") and os.path.isfile(os.path.join(root, m.group(1)))):
                problems.append(f"{os.path.relpath(path, root)}:{number}: includes \"{m.group(1)}\", "
                                "which is not a public header (include/torchmt/)")
for p in problems:
    print(p)
print(f"{count} public headers, {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
