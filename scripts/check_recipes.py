#!/usr/bin/env python3
"""Fails when a recipe in the docs names something the repository does not have.

Usage: check_recipes.py [REPO_ROOT [DOC...]]   (default: docs/extending.md)

docs/extending.md walks through adding a model family, a backend op and a parallelism file by
file. A recipe whose paths or names have drifted sends its reader to files that moved, so this
check holds it to the tree:

- paths: a code span without spaces that contains "/" or ends in one of our extensions is a
  path and must name a file or folder, from the repository root or from src/kintsugi/ (spans
  that start with "build/", the build's outputs, or with "-", a flag, are not paths). A span
  with a placeholder, `src/kintsugi/backend/cpu/<op>.cpp`, names a file to create, and one with
  a "*" names a set of files: their folder must exist;
- symbols: `PATH:NAME` must name a file that holds every identifier of NAME as a whole word
  (`src/kintsugi/core/parallel_layout.hpp:ParallelLayout::problem`). In a numbered step (its
  first line and the indented lines under it), a span that is a bare identifier
  (`layout_problem`, `EnumNames<Family>`, `world()`) must be in one of the files the step opens
  with (its leading paths, below) that exist; a step that opens only new files is not checked;
- commands: in fenced code blocks, every word that starts with one of the repository's
  top-level folders (src/, tests/, scripts/, ...) must name a file or folder;
- links: a relative Markdown link must name a file, from the document's folder;
- counts: a section that says "**N files**" must open exactly N distinct files in its numbered
  steps. The files a step opens are the paths of the spans before the first " — " of its first
  line (`1. `a.cpp`, `b.hpp` — what to add there`).

Prints every problem as FILE:LINE: message and exits 1 if there is one.
"""
import os
import re
import sys

OURS = (".md", ".hpp", ".cpp", ".cu", ".cuh", ".cmake", ".py", ".sh", ".mjs", ".toml", ".txt")
TOP = ("src/", "tests/", "scripts/", "configs/", "docs/", "cmake/", "bench/")
SPAN = re.compile(r"`([^`\n]+)`")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:::\w+)*(?:<[\w:, ]+>)?(?:\(\))?")
WORD = re.compile(r"[A-Za-z_]\w*")
STEP = re.compile(r"^\s*\d+\.\s")
COUNT = re.compile(r"\*\*(\d+) files\*\*")
DASH = " \u2014 "


def is_path(span):
    if " " in span or span.startswith(("build/", "-")):
        return False
    return "/" in span or span.endswith(OURS)


def split_symbol(span):
    """`path:Name` -> (path, Name); a plain path -> (path, None)."""
    path, sep, name = span.partition(":")
    return (path, name) if sep and name else (span, None)


class Repo:
    def __init__(self, root):
        self.root = root

    def resolve(self, path):
        """The path as a file or folder of the repository, or None."""
        path = path.rstrip("/")
        for base in ("", "src/kintsugi/"):
            full = os.path.join(self.root, base + path)
            if os.path.exists(full):
                return full
        return None

    def placeholder_folder(self, path):
        """`a/b/<x>.cpp` or `a/b/*.cpp` -> whether a/b exists (None: no placeholder)."""
        marks = [path.index(c) for c in "<*" if c in path]
        if not marks:
            return None
        folder = path[: min(marks)].rpartition("/")[0]
        return bool(folder) and self.resolve(folder) is not None and \
            os.path.isdir(self.resolve(folder))


def words_missing(text, name):
    return [w for w in WORD.findall(name) if not re.search(r"\b%s\b" % re.escape(w), text)]


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def check(repo, doc_path, problems):
    doc = os.path.relpath(doc_path, repo.root)
    lines = read(doc_path).splitlines()
    checked = {"paths": 0, "symbols": 0, "links": 0, "counts": 0}
    fenced = False
    section, sections = None, []  # [(title, line of its count, count, opened files)]
    leading = None  # the files the current numbered step opens with (None: not in a step)
    for number, line in enumerate(lines, 1):
        where = f"{doc}:{number}"
        if line.lstrip().startswith("```"):
            fenced, leading = not fenced, None
            continue
        if fenced:
            for word in line.split():
                word = word.strip("\"'(),;")
                if word.startswith(TOP) and repo.placeholder_folder(word) is None:
                    checked["paths"] += 1
                    if repo.resolve(word) is None:
                        problems.append(f"{where}: {word} is not a file or folder of the "
                                        f"repository")
            continue
        if line.startswith("## "):
            section = [line[3:].strip(), None, None, set()]
            sections.append(section)
        if section is not None and (m := COUNT.search(line)) and section[2] is None:
            section[1], section[2] = number, int(m.group(1))
        for m in re.finditer(r"\]\(([^)\s]+)\)", line):
            target = m.group(1).split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            checked["links"] += 1
            if not os.path.exists(os.path.join(os.path.dirname(doc_path), target)):
                problems.append(f"{where}: the link {target} names no file next to {doc}")

        step = STEP.match(line)
        head = line.split(DASH)[0] if step else ""
        if step:
            leading = []
        elif not (line.startswith(" ") and line.strip()):
            leading = None  # the step ended: a blank line or unindented text
        for m in SPAN.finditer(line):
            span = m.group(1)
            if is_path(span):
                path, name = split_symbol(span)
                checked["paths"] += 1
                placeholder = repo.placeholder_folder(path)
                if placeholder is False:
                    problems.append(f"{where}: {path}: the folder of this new file does not exist")
                elif placeholder is None and repo.resolve(path) is None:
                    problems.append(f"{where}: {path} is not a file or folder of the repository")
                elif name:
                    checked["symbols"] += 1
                    full = repo.resolve(path)
                    if placeholder is not None or os.path.isdir(full):
                        problems.append(f"{where}: `{span}`: a name can only be checked in a "
                                        f"file that exists")
                    elif missing := words_missing(read(full), name):
                        problems.append(f"{where}: {path} has no {', '.join(missing)} "
                                        f"(`{span}`)")
                if step and m.start() < len(head):
                    leading.append(path)
            elif leading is not None and IDENTIFIER.fullmatch(span):
                files = [repo.resolve(p) for p in leading if repo.placeholder_folder(p) is None]
                files = [f for f in files if f and os.path.isfile(f)]
                if not files:
                    continue  # a step about new files names what it creates
                checked["symbols"] += 1
                texts = [read(f) for f in files]
                if all(words_missing(t, span) for t in texts):
                    problems.append(f"{where}: `{span}` is in none of the step's files "
                                    f"({', '.join(leading)}); write `path:{span}` if it lives "
                                    f"elsewhere")
        if section is not None and step:
            section[3].update(leading)

    for title, number, count, opened in sections:
        if count is None:
            continue
        checked["counts"] += 1
        if count != len(opened):
            problems.append(f"{doc}:{number}: \"{title}\" says {count} files, but its steps "
                            f"open {len(opened)}: {', '.join(sorted(opened))}")
    return checked


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    docs = sys.argv[2:] or ["docs/extending.md"]
    repo = Repo(root)
    problems, totals = [], {}
    for d in docs:
        for key, n in check(repo, os.path.join(root, d), problems).items():
            totals[key] = totals.get(key, 0) + n
    for p in problems:
        print(p)
    print(f"{', '.join(docs)}: {totals.get('paths', 0)} paths, {totals.get('symbols', 0)} "
          f"names, {totals.get('links', 0)} links, {totals.get('counts', 0)} file counts checked, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
