#!/usr/bin/env python3
"""Usage: check_fresh.py GENERATED COMMITTED

Fails when a committed copy of generated output (ui-export/src/protocol.ts,
protocol/PROTOCOL.md) is not what protocol/gen.py makes from the schema now.
"""
import difflib
import pathlib
import sys

generated, committed = (pathlib.Path(p) for p in sys.argv[1:3])
new, old = generated.read_text(), committed.read_text() if committed.exists() else ""
if new == old:
    print(f"{committed.name} is fresh")
    print("1 passed, 0 failed")
    sys.exit(0)
diff = difflib.unified_diff(old.splitlines(), new.splitlines(), str(committed), "generated", lineterm="")
print("\n".join(list(diff)[:40]))
print(f"{committed} is stale: run python3 protocol/gen.py --sync (never edit it by hand)")
print("0 passed, 1 failed")
sys.exit(1)
