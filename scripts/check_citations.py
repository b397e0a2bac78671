#!/usr/bin/env python3
"""Fails when a comment in the sources cites something the repository does not have.

Usage: check_citations.py [REPO_ROOT]

Comments in src/, cmake/, tests/, bench/, scripts/ and the top-level CMakeLists.txt point
readers at files ("docs/planner.md", "plan/flops.hpp", "gemm_balanced.cpp") and at the
numbered principles of docs/design.md ("docs/design.md principle 7"). A reader who clones the
repository must be able to follow each one, so this check resolves every such reference:

- a path with a folder in it must name a file or folder of the repository, relative to the
  root, to src/, src/kintsugi/, tests/ or the citing file's own folder (or be the tail of such a
  path: "cuda/attention.cu");
- a bare file name of ours (.md, .hpp, .cpp, .cu, .cuh, .cmake) must be the name of some file
  in the repository;
- "principle N" must be a principle docs/design.md numbers ("## N. ..."), and the citation
  must name docs/design.md, the one file that numbers principles (in the docs too).

Names of files that are not the repository's (other projects' files, what a script writes)
are listed in IGNORED below, each with its reason; system headers (.h) are not checked. Prints every broken
citation as FILE:LINE: message and exits 1 if there is one.
"""
import os
import re
import subprocess
import sys

SCANNED = ["src", "cmake", "tests", "bench", "scripts", "CMakeLists.txt"]
SLASH_COMMENT = {".hpp", ".cpp", ".h", ".cu", ".cuh", ".mjs", ".c"}
HASH_COMMENT = {".cmake", ".sh", ".py", ".toml", ".txt"}
OURS = ("md", "hpp", "cpp", "cu", "cuh", "cmake", "py", "sh", "mjs", "toml")
# A file reference: optional folders, a name, one of our extensions, not followed by more name.
FILE_REF = re.compile(
    r"(?<![\w./~<>$*-])((?:[\w.-]+/)*[\w.-]*\w\.(?:%s))(?![\w/-])" % "|".join(OURS))
PRINCIPLE = re.compile(r"\bprinciples?\s+(\d+(?:(?:\s*,\s*|\s+and\s+|\s*-\s*)\d+)*)")

# Names in comments that are not files of this repository, and why.
IGNORED = {
    "src/encoder.py": "OpenAI's GPT-2 repository, the reference BPE encoder",
    "tools/preprocess_data.py": "Megatron-LM's preprocessing script",
    "preprocess_data.py": "Megatron-LM's preprocessing script",
    "results.md": "what bench/gpu_check.sh writes into its output folder",
    "config.toml": "what `kintsugi train` writes into a run's output folder (saved_config.hpp)",
}


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard"],
                             check=True, capture_output=True, text=True).stdout
        return [p for p in out.splitlines() if os.path.exists(os.path.join(root, p))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for top in SCANNED + ["docs", "configs", "README.md"]:
            base = os.path.join(root, top)
            if os.path.isfile(base):
                files.append(top)
            for d, _, names in os.walk(base):
                files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def slash_comment(line):
    """The text after a // that is not inside a string literal, or None."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            # A digit separator (1'000) or a character literal; only " opens a string here.
            if c == '"':
                quote = c
        elif line.startswith("//", i):
            return line[i + 2:]
        i += 1
    return None


def comment_blocks(path, text):
    """Yields (first line number, [(line number, comment text)]) per run of comment lines."""
    ext = os.path.splitext(path)[1]
    if os.path.basename(path) == "CMakeLists.txt":
        ext = ".cmake"
    block = []
    in_c_comment = False
    for number, line in enumerate(text.splitlines(), 1):
        comment = None
        if ext in SLASH_COMMENT:
            stripped = line.strip()
            if in_c_comment:
                comment = stripped.split("*/")[0].lstrip("* ")
                in_c_comment = "*/" not in stripped
            elif stripped.startswith("/*"):
                comment = stripped[2:].split("*/")[0].lstrip("* ")
                in_c_comment = "*/" not in stripped
            else:
                comment = slash_comment(line)
        elif ext in HASH_COMMENT:
            stripped = line.strip()
            if stripped.startswith("#") and not stripped.startswith("#!"):
                comment = stripped.lstrip("#")
        if comment is None:
            if block:
                yield block
            block = []
        else:
            block.append((number, comment))
    if block:
        yield block


def resolves(ref, citing, root, paths, names, folders):
    ref = ref.rstrip(".")
    if "/" not in ref:
        return ref in names
    candidates = [ref, "src/" + ref, "src/kintsugi/" + ref, "tests/" + ref,
                  os.path.normpath(os.path.join(os.path.dirname(citing), ref))]
    if any(c in paths or c in folders for c in candidates):
        return True
    return any(p.endswith("/" + ref) for p in paths)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    files = tracked_files(root)
    paths = set(files)
    names = {os.path.basename(p) for p in files}
    folders = {os.path.dirname(p) for p in files}
    folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
    design = os.path.join(root, "docs", "design.md")
    principles = set()
    if os.path.exists(design):
        with open(design, encoding="utf-8") as f:
            principles = {int(m.group(1)) for m in re.finditer(r"^## (\d+)\. ", f.read(), re.M)}

    problems = []
    scanned = [p for p in files
               if any(p == top or p.startswith(top + "/") for top in SCANNED)
               and os.path.splitext(p)[1] in SLASH_COMMENT | HASH_COMMENT]
    citations = 0
    for path in sorted(scanned):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for block in comment_blocks(path, text):
            # Join the block so a citation broken over two lines is still one citation; keep
            # where each line starts to report the line a match begins on.
            joined, starts = "", []
            for number, comment in block:
                starts.append((len(joined), number))
                joined += comment.strip() + " "

            def line_of(offset):
                return max(n for start, n in starts if start <= offset)

            for m in FILE_REF.finditer(joined):
                ref = m.group(1)
                if ref in IGNORED:
                    continue
                citations += 1
                if not resolves(ref, path, root, paths, names, folders):
                    problems.append(f"{path}:{line_of(m.start())}: cites {ref}, which the "
                                    f"repository does not have")
            for m in PRINCIPLE.finditer(joined):
                citations += 1
                numbers = [int(n) for n in re.findall(r"\d+", m.group(1))]
                before = joined[max(0, m.start() - 40):m.start()]
                if "docs/design.md" not in before:
                    problems.append(f"{path}:{line_of(m.start())}: cites \"{m.group(0)}\" "
                                    f"without naming docs/design.md, the file that numbers "
                                    f"the principles")
                for n in numbers:
                    if n not in principles:
                        problems.append(f"{path}:{line_of(m.start())}: cites principle {n}, "
                                        f"which docs/design.md does not number")
    # The docs cite principles too (their file references name run outputs and other
    # projects' files as often as ours, so only the principles are checked there).
    for path in sorted(p for p in files if p.endswith(".md") and
                       (p.startswith("docs/") or "/" not in p)):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        for m in PRINCIPLE.finditer(text):
            citations += 1
            line = text.count("\n", 0, m.start()) + 1
            for n in (int(n) for n in re.findall(r"\d+", m.group(1))):
                if path != "docs/design.md" and \
                        "design.md" not in text[max(0, m.start() - 40):m.start()]:
                    cited = " ".join(m.group(0).split())
                    problems.append(f"{path}:{line}: cites \"{cited}\" without naming "
                                    f"docs/design.md")
                    break
                if n not in principles:
                    problems.append(f"{path}:{line}: cites principle {n}, which "
                                    f"docs/design.md does not number")
    for p in problems:
        print(p)
    print(f"{len(scanned)} files, {citations} citations checked, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
