#!/usr/bin/env python3
"""Runs every command the documentation shows, as written, and fails when one fails.

The documents are README.md and every Markdown file of the repository it links to, followed
link by link. In them:

- a fenced block tagged ``sh``, ``bash`` or ``shell`` is a script: it runs whole, with
  ``bash -eo pipefail``, from the repository root;
- in a block tagged ``console``, each line that starts with ``$ `` is a command (with its
  ``\\`` continuation lines); the other lines are its output and are not checked;
- any other block (``yaml``, ``text``, untagged) is not run, and must not look like commands:
  a line starting with ``batchsim``, ``build/``, ``scripts/`` or ``$ `` there is an error (tag
  the block ``sh``, or ``console`` for a command with its output);
- the line ``<!-- docs-check: skip: REASON -->`` right before a block skips it; REASON is
  printed (for example: it needs an NVIDIA GPU, or a Slurm cluster).

The blocks run in document order, in a scratch copy of the repository (the files git tracks,
or would track), with the build folder linked in as ``build``: commands may write where a user
would (``results/``, a profile under ``hwmodel/profiles/``) without touching this checkout, and
a block may use what an earlier block of the same run wrote.

With ``--record DIR`` each command's output is also written to DIR (one file per command,
named by its place), so that two runs, before and after a change, can be compared with
``diff -r`` to find the documented outputs that the change moved (``--keep`` keeps the files
the commands wrote as well).

usage: scripts/check-docs.py [--build DIR] [--list] [--keep] [--record DIR] [--timeout S] [--only TEXT]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_TAGS = {"sh", "bash", "shell"}
SKIP = re.compile(r"^<!--\s*docs-check:\s*skip:\s*(.+?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")
LOOKS_LIKE_COMMAND = re.compile(r"^\s*(\$ |batchsim\b|build/|scripts/)")


@dataclass
class Block:
    doc: Path
    line: int  # the line of the opening fence, 1-based
    tag: str
    text: str
    skip: str = ""
    commands: list = field(default_factory=list)

    @property
    def where(self):
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def built_for_python(build):
    """The interpreter the build's Python module was made for (CMakeCache.txt's
    Python_EXECUTABLE, which the BATCHSIM_PYTHON build sets), or "" when there is none."""
    cache = build / "CMakeCache.txt"
    if not (build / "python").is_dir() or not cache.exists():
        return ""
    for line in cache.read_text(errors="replace").splitlines():
        if line.startswith("Python_EXECUTABLE:"):
            path = line.split("=", 1)[1].strip()
            return path if Path(path).exists() else ""
    return ""


def linked_docs(start):
    """README.md and the Markdown files it links to, transitively, inside the repository."""
    seen, order, todo = set(), [], [start]
    while todo:
        doc = todo.pop(0).resolve()
        if doc in seen or not doc.is_file():
            continue
        seen.add(doc)
        order.append(doc)
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            path = (doc.parent / target).resolve()
            if ROOT in path.parents and "build" not in path.relative_to(ROOT).parts[:1]:
                todo.append(path)
    return order


def console_commands(text):
    commands, current = [], None
    for line in text.splitlines():
        if current is not None:
            current.append(line)
            if not line.rstrip().endswith("\\"):
                commands.append("\n".join(current))
                current = None
        elif line.startswith("$ "):
            current = [line[2:]]
            if not line.rstrip().endswith("\\"):
                commands.append(line[2:])
                current = None
    return commands


def blocks_of(doc):
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks, errors = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, tag = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1  # the closing fence
        skip = ""
        if start > 0 and SKIP.match(lines[start - 1]):
            skip = SKIP.match(lines[start - 1]).group(1)
        block = Block(doc, start + 1, tag, "\n".join(body) + "\n", skip)
        if tag in RUN_TAGS:
            block.commands = [block.text]
        elif tag == "console":
            block.commands = console_commands(block.text)
        else:
            for k, line in enumerate(body):
                if LOOKS_LIKE_COMMAND.match(line):
                    errors.append(f"{doc.relative_to(ROOT)}:{start + 2 + k}: a command in a block "
                                  f"tagged '{tag or 'nothing'}' is never checked; tag the block sh "
                                  f"(or console, for a command with its output): {line.strip()}")
                    break
        if block.commands:
            blocks.append(block)
    return blocks, errors


def repository_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=ROOT, check=True, capture_output=True).stdout
        return [f for f in out.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        skip = {"build", "results", ".git"}
        return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                if p.is_file() and not (set(p.relative_to(ROOT).parts) & skip)]


def scratch_copy(build):
    work = Path(tempfile.mkdtemp(prefix="batchsim-docs-"))
    for name in repository_files():
        src = ROOT / name
        if not src.is_file() or name.startswith("build"):
            continue
        dst = work / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    (work / "build").symlink_to(build.resolve(), target_is_directory=True)
    return work


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"), help="the CMake build folder (default build/)")
    ap.add_argument("--list", action="store_true", help="list the blocks, run nothing")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    ap.add_argument("--record", default="", help="write each command's output to a file in this folder")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per block (default 600)")
    ap.add_argument("--only", default="", help="run only blocks whose place (FILE:LINE) contains this")
    ap.add_argument("--python", default="", help="the python3 the commands run (the one the batchsim "
                    "module in build/python was built for; default: the build's, from its "
                    "CMakeCache.txt, else python3 on PATH)")
    args = ap.parse_args(argv)

    docs = linked_docs(ROOT / "README.md")
    blocks, errors = [], []
    for doc in docs:
        b, e = blocks_of(doc)
        blocks += b
        errors += e
    if args.only:
        blocks = [b for b in blocks if args.only in b.where]
    print(f"check-docs: {len(docs)} documents, {len(blocks)} command blocks "
          f"({sum(1 for b in blocks if b.skip)} skipped)")
    if args.list:
        for b in blocks:
            print(f"  {b.where} [{b.tag}]" + (f" skipped: {b.skip}" if b.skip else ""))
        for e in errors:
            print(f"check-docs: error: {e}")
        return 1 if errors else 0

    build = Path(args.build)
    if not (build / "experiments" / "batchsim").exists():
        print(f"check-docs: error: no batchsim binary under {build} (build first)", file=sys.stderr)
        return 2
    work = scratch_copy(build)
    failed = []
    record = Path(args.record) if args.record else None
    if record:
        record.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, LC_ALL="C.UTF-8")
    if not args.python:
        args.python = built_for_python(build)
    if args.python:
        # The documented `python3 ...` commands import the module built for this interpreter; a
        # different python3 earlier on PATH (pyenv, conda) would lack its numpy and pandas.
        bin_dir = work / ".docs-bin"
        bin_dir.mkdir()
        (bin_dir / "python3").symlink_to(args.python)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    try:
        for b in blocks:
            if b.skip:
                print(f"SKIP {b.where}: {b.skip}")
                continue
            for k, command in enumerate(b.commands):
                start = time.monotonic()
                try:
                    r = subprocess.run(["bash", "-eo", "pipefail", "-c", command], cwd=work, env=env,
                                       capture_output=True, text=True, timeout=args.timeout)
                    rc, output = r.returncode, r.stdout + r.stderr
                except subprocess.TimeoutExpired as e:
                    rc, output = "timeout", f"(more than {args.timeout:.0f} s)\n{e.stdout or ''}{e.stderr or ''}"
                seconds = time.monotonic() - start
                if record:
                    name = f"{b.where.replace('/', '_').replace(':', '_')}_{k}.out"
                    (record / name).write_text(f"$ {command}\n{output}", encoding="utf-8")
                first = command.strip().splitlines()[0][:70]
                if rc == 0:
                    print(f"ok   {b.where} ({seconds:.1f} s): {first}")
                else:
                    print(f"FAIL {b.where} (exit {rc}, {seconds:.1f} s): {first}")
                    tail = "\n".join(output.rstrip().splitlines()[-15:])
                    print("     " + tail.replace("\n", "\n     "))
                    failed.append(b.where)
    finally:
        if args.keep:
            print(f"check-docs: scratch copy kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for e in errors:
        print(f"check-docs: error: {e}")
    if failed or errors:
        print(f"check-docs: {len(failed)} failing block(s): {', '.join(failed)}; "
              f"{len(errors)} untagged command block(s)")
        return 1
    print("check-docs: every documented command ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
