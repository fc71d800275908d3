#!/usr/bin/env python3
"""Fails when a file of gateway/core/ includes a header from outside core.

Core is the pure library under the shell (architecture.md): its files may
include each other ("xalloc.h" beside them, or "core/xalloc.h" through the
gateway/ include directory the build gives every target), the C library's
headers and <jansson.h>, nothing else. The build cannot tell: the include
directory that finds "core/x.h" finds the shell's "config.h" too, and a
header used only for its types never reaches the linker.

Usage: check_core_purity.py GATEWAY_DIR   (the folder holding core/)
Prints one line per violation, "path:line: why", and exits 1 if any.
"""
import pathlib
import re
import sys

# ISO C11 and the POSIX headers core may use; anything else is a library of its own.
SYSTEM_HEADERS = {
    'assert.h', 'complex.h', 'ctype.h', 'errno.h', 'fenv.h', 'float.h', 'inttypes.h', 'iso646.h',
    'limits.h', 'locale.h', 'math.h', 'setjmp.h', 'signal.h', 'stdalign.h', 'stdarg.h', 'stdatomic.h',
    'stdbool.h', 'stddef.h', 'stdint.h', 'stdio.h', 'stdlib.h', 'stdnoreturn.h', 'string.h', 'strings.h',
    'tgmath.h', 'time.h', 'uchar.h', 'wchar.h', 'wctype.h',
    'arpa/inet.h', 'netinet/in.h', 'sys/socket.h', 'sys/types.h',
}
ALLOWED_LIBRARY_HEADERS = {'jansson.h'}

INCLUDE = re.compile(r'^\s*#\s*include\s*(.*?)\s*(?://.*|/\*.*)?$')


def resolve(name, including_file, gateway):
    """The file a quoted include names, searched as the compiler does: beside the file, then gateway/."""
    for base in (including_file.parent, gateway):
        candidate = (base / name).resolve()
        if candidate.is_file():
            return candidate
    return None


def violation(target, path, gateway, core):
    """Why the include target (the text after #include) is not allowed in path, or None."""
    if target.startswith('<') and target.endswith('>'):
        name = target[1:-1]
        if name in SYSTEM_HEADERS or name in ALLOWED_LIBRARY_HEADERS:
            return None
        return f'includes <{name}>: core links nothing but jansson and the C library'
    if not (target.startswith('"') and target.endswith('"')):
        return f'includes {target}: only a plain "file" or <file> can be checked'
    name = target[1:-1]
    found = resolve(name, path, gateway)
    if found is None:
        return f'includes "{name}", which is no file of core'
    if core not in found.parents:
        return f'includes "{name}" ({found.relative_to(gateway.parent)}), a header outside gateway/core'
    return None


def main(argv):
    if len(argv) != 2:
        print('usage: check_core_purity.py GATEWAY_DIR', file=sys.stderr)
        return 2
    gateway = pathlib.Path(argv[1]).resolve()
    core = gateway / 'core'
    files = sorted(p for p in core.iterdir() if p.suffix in ('.c', '.h'))
    if not files:
        print(f'{core}: no core files found', file=sys.stderr)
        return 2
    bad = 0
    for path in files:
        for number, line in enumerate(path.read_text(encoding='utf-8').splitlines(), start=1):
            m = INCLUDE.match(line)
            if m is None:
                continue
            why = violation(m.group(1), path, gateway, core)
            if why is not None:
                print(f'{path.relative_to(gateway.parent)}:{number}: {why}')
                bad += 1
    if bad:
        print(f'core-purity: {bad} include{"s" if bad != 1 else ""} outside core')
        return 1
    print(f'core-purity: {len(files)} files include nothing outside core')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
