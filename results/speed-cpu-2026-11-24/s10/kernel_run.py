"""Scratch (session 10, at commit 187ab06): train.py with the attention kernel forced by KERNEL=flash|math (else model/sdpa.py's choice)."""
import os, sys
sys.path.insert(0, "/work/main")
import model.sdpa as ms
if os.environ.get("KERNEL") == "flash":
    ms.uses_math_kernel = lambda q: False
elif os.environ.get("KERNEL") == "math":
    ms.uses_math_kernel = lambda q: q.device.type == "cpu"
import train
sys.exit(train.main(sys.argv[1:]))
