#!/usr/bin/env python3
"""Fails when a list in the docs has drifted from what it lists.

Usage: check_doc_lists.py KINTSUGI [REPO_ROOT]
       check_doc_lists.py KINTSUGI --switch-table   prints docs/switches.md's table as it must be

- README.md's "## Documentation" section names every docs/*.md file;
- docs/config.md's key table has exactly the keys `kintsugi train --help-config` prints, each
  with the same default, and the presets its model.preset row lists and its "## Presets" table
  has rows for are exactly the ones the program knows;
- docs/switches.md's table is the one `kintsugi --help-switches` gives (every switch, its kind,
  default, values, what it does and where it was measured), every KINTSUGI_* name in docs/,
  README.md and src/ is a switch or one of NOT_SWITCHES below, and no source reads a switch
  with getenv or sets one with setenv (the table reads them once: core/switches.hpp).

Prints every difference as FILE: message and exits 1 if there is one.
"""
import os
import re
import subprocess
import sys

# KINTSUGI_* names that are not environment switches, and what they are.
NOT_SWITCHES = {
    "KINTSUGI_ASSERT": "a macro (core/error.hpp)",
    "KINTSUGI_INSTANTIATE": "a macro of the CPU kernels' sources",
    "KINTSUGI_CUDA_LAUNCH": "a macro (backend/cuda/device_math.cuh)",
    "KINTSUGI_CUDA_CHECK_INDEX": "a macro (backend/cuda/device_math.cuh)",
    "KINTSUGI_WITH_CUDA": "a compile definition (cmake/Cuda.cmake)",
    "KINTSUGI_WITH_CUDNN": "a compile definition (cmake/Cuda.cmake)",
    "KINTSUGI_WITH_NCCL": "a compile definition (cmake/Cuda.cmake)",
    "KINTSUGI_CUDA_MIN_ARCH": "a compile definition (cmake/Cuda.cmake)",
    "KINTSUGI_CUDA": "a CMake option",
    "KINTSUGI_CUDA_ARCHITECTURES": "a CMake option (cmake/Cuda.cmake)",
    "KINTSUGI_NATIVE": "a CMake option",
    "KINTSUGI_TESTS": "a CMake option",
    "KINTSUGI_BENCH": "a CMake option",
    "KINTSUGI_SANITIZE": "a CMake option",
    "KINTSUGI_UNITY": "a CMake option (cmake/Unity.cmake)",
    "KINTSUGI_UNITY_BATCH": "a CMake option (cmake/Unity.cmake)",
    "KINTSUGI_NO_UNITY": "a CMake target property (cmake/Unity.cmake)",
    "KINTSUGI_CCACHE": "read by scripts/compiler_cache.sh, not by the program",
    "KINTSUGI_BIN": "an argument of scripts/fetch_data.sh",
}
NAME = re.compile(r"\bKINTSUGI_[A-Z0-9_]*[A-Z0-9]\b")
ENV_CALL = re.compile(r"\b(?:getenv|setenv|unsetenv)\s*\(\s*\"KINTSUGI_")


def section(text, title):
    """The lines of a "## title" section, up to the next "## " heading."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == title
            continue
        if inside:
            lines.append(line)
    return "\n".join(lines)


def presets_of(meaning):
    m = re.search(r"start from a preset \(([^)]*)\)", meaning)
    return sorted(p.strip() for p in m.group(1).split(",")) if m else []


def program_switches(kintsugi):
    """`kintsugi --help-switches` as rows: name, kind, default, values, description, reference."""
    text = subprocess.run([kintsugi, "--help-switches"], check=True, capture_output=True,
                          text=True, env={k: v for k, v in os.environ.items()
                                          if not k.startswith("KINTSUGI_")}).stdout
    lines, rows = text.splitlines(), []
    for i, line in enumerate(lines):
        m = re.match(r"(KINTSUGI_\w+) = .*?  \((\w+), default (.*?), takes (.*)\)$", line)
        if m and i + 2 < len(lines) and lines[i + 2].startswith("    measured/why: "):
            rows.append(m.groups() + (lines[i + 1].strip(), lines[i + 2][18:].strip()))
    return rows


def switch_table(rows):
    """docs/switches.md's table of `rows` (program_switches)."""
    out = ["| switch | kind | default | takes | what it does | measured, or why |",
           "|---|---|---|---|---|---|"]
    for name, kind, default, values, description, reference in rows:
        cells = [f"`{name}`", kind, f"`{default}`" if default != "none" else "none",
                 "`" + values.replace("|", "\\|") + "`", description, reference]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def source_files(root):
    for top in ("src",):
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if os.path.splitext(n)[1] in (".hpp", ".cpp", ".cu", ".cuh"):
                    yield os.path.join(d, n)


def check_switches(kintsugi, root, errors):
    rows = program_switches(kintsugi)
    if not rows:
        errors.append("`kintsugi --help-switches` printed no switches")
        return
    names = {r[0] for r in rows}
    # Each reference's docs sections exist: a docs file followed by quoted titles (`, "Title"`,
    # `and "Title"`) names headings of that file.
    for name, *_, reference in rows:
        for m in re.finditer(r'(docs/[\w.-]+\.md)((?:(?:,| and) "[^"]+")+)', reference):
            path = os.path.join(root, m.group(1))
            headings = set()
            if os.path.isfile(path):
                headings = {re.sub(r"^#+\s*", "", l).strip() for l in open(path)
                            if l.startswith("#")}
            for title in re.findall(r'"([^"]+)"', m.group(2)):
                if title not in headings:
                    errors.append(f"core/switches.cpp: {name} cites {m.group(1)}, \"{title}\", "
                                  "which is not a heading there")
    doc_path = os.path.join(root, "docs", "switches.md")
    doc = open(doc_path).read()
    expected = switch_table(rows)
    if expected not in doc:
        errors.append("docs/switches.md: its table is not the one `kintsugi --help-switches` "
                      "gives; `scripts/check_doc_lists.py KINTSUGI --switch-table` prints it")

    # Every KINTSUGI_* name a reader meets is a switch or a named other thing.
    texts = [os.path.join(root, "README.md")]
    texts += [os.path.join(root, "docs", n) for n in sorted(os.listdir(os.path.join(root, "docs")))
              if n.endswith(".md")]
    for path in texts + list(source_files(root)):
        rel = os.path.relpath(path, root)
        for lineno, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
            for name in NAME.findall(line):
                if name not in names and name not in NOT_SWITCHES:
                    errors.append(f"{rel}:{lineno}: {name} is not a switch "
                                  "(core/switches.cpp) nor in check_doc_lists.py's NOT_SWITCHES")

    # The table reads the environment once; a getenv elsewhere would bypass its checks, a
    # setenv after the first read would change nothing.
    for top in ("src", "tests", "bench"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for n in sorted(files):
                if os.path.splitext(n)[1] not in (".hpp", ".cpp", ".cu", ".cuh"):
                    continue
                path = os.path.join(d, n)
                for lineno, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    if ENV_CALL.search(line):
                        errors.append(f"{os.path.relpath(path, root)}:{lineno}: a KINTSUGI_* "
                                      "variable read or set directly: use the switch table "
                                      "(core/switches.hpp)")


def main():
    kintsugi = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] == "--switch-table":
        print(switch_table(program_switches(kintsugi)))
        return 0
    root = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.dirname(__file__))
    errors = []

    readme = open(os.path.join(root, "README.md")).read()
    index = section(readme, "Documentation")
    for name in sorted(os.listdir(os.path.join(root, "docs"))):
        if name.endswith(".md") and f"`docs/{name}`" not in index:
            errors.append(f"README.md: the Documentation section does not list docs/{name}")

    # `kintsugi train --help-config`: KEY TYPE default VALUE MEANING, columns padded.
    help_text = subprocess.run([kintsugi, "train", "--help-config"], check=True,
                               capture_output=True, text=True).stdout
    program = {}
    for line in help_text.splitlines():
        m = re.match(r"(\S+)\s+\S+\s+default (.*?)\s{2,}(\S.*)$", line) or \
            re.match(r"(\S+)\s+\S+\s+default (\S+) (\S.*)$", line)
        if m:
            program[m.group(1)] = (m.group(2).strip(), m.group(3))
    if not program:
        errors.append("`kintsugi train --help-config` printed no keys")

    config_md = open(os.path.join(root, "docs", "config.md")).read()
    docs = {}
    for line in config_md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"`[a-z_]+\.[a-z_0-9]+`", cells[0]):
            docs[cells[0].strip("`")] = (cells[2].strip("`"), cells[3])
    for key in sorted(set(program) - set(docs)):
        errors.append(f"docs/config.md: no row for {key} (`kintsugi train --help-config` has it)")
    for key in sorted(set(docs) - set(program)):
        errors.append(f"docs/config.md: {key} is not a key `kintsugi train --help-config` knows")
    for key in sorted(set(program) & set(docs)):
        if program[key][0] != docs[key][0]:
            errors.append(f"docs/config.md: {key} defaults to {docs[key][0]}, but the program's "
                          f"default is {program[key][0]}")

    known = presets_of(program.get("model.preset", ("", ""))[1])
    listed = presets_of(docs.get("model.preset", ("", ""))[1])
    if listed != known:
        errors.append(f"docs/config.md: model.preset lists {', '.join(listed)}; the program knows "
                      f"{', '.join(known)}")
    table = re.findall(r"^\| `([^`]+)` \|", section(config_md, "Presets"), re.M)
    for name in sorted(set(known) - set(table)):
        errors.append(f"docs/config.md: the Presets table has no row for {name}")
    for name in sorted(set(table) - set(known)):
        errors.append(f"docs/config.md: the Presets table has {name}, which is not a preset")

    check_switches(kintsugi, root, errors)

    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
