#!/usr/bin/env python3
"""The request path's two state fields move only through their setters.

A request's phase changes only in sl__set_phase (gateway/request.c) and what
its client has been sent only in sl__set_client_out (gateway/hold.c), each
against its table of allowed moves. This fails, naming file and line, when
any other line of gateway/ assigns either field.

Usage: check_moves.py GATEWAY_DIR
"""
import pathlib
import re
import sys

# field: (pattern of an assignment, the one file and line text allowed to make it)
FIELDS = {
    "phase": (re.compile(r"(->|\.)phase\s*=(?!=)"), ("request.c", "r->phase = to;")),
    "out.state": (re.compile(r"\bout\.state\s*=(?!=)"), ("hold.c", "r->out.state = to;")),
}


def problems(gateway: pathlib.Path):
    found = []
    for path in sorted(gateway.glob("*.c")) + sorted(gateway.glob("*.h")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//")[0]
            for field, (pattern, (allowed_file, allowed_text)) in FIELDS.items():
                if not pattern.search(code):
                    continue
                if "stream.phase" in code or "st->phase" in code:
                    continue  # the stream classifier's own phase (core/stream_class.h), not the request's
                if path.name == allowed_file and code.strip() == allowed_text:
                    continue
                found.append(f"{path}:{n}: assigns the request's {field} outside its setter: {line.strip()}")
    return found


def main():
    gateway = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "gateway")
    found = problems(gateway)
    for p in found:
        print(p)
    print(f"{len(found)} assignment(s) outside the setters")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
