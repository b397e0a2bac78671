#!/usr/bin/env python3
"""Fails when a list in the docs has drifted from what it lists.

Usage: check_doc_lists.py KINTSUGI [REPO_ROOT]

- README.md's "## Documentation" section names every docs/*.md file;
- docs/config.md's key table has exactly the keys `kintsugi train --help-config` prints, each
  with the same default, and the presets its model.preset row lists and its "## Presets" table
  has rows for are exactly the ones the program knows.

Prints every difference as FILE: message and exits 1 if there is one.
"""
import os
import re
import subprocess
import sys


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


def main():
    kintsugi = sys.argv[1]
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

    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
