#!/usr/bin/env python3
"""Runs every command the documentation shows, as written, and fails when one fails.

The documents are README.md, every page of docs/, and every Markdown file of the repository
they link to, followed link by link. In them:

- a fenced block tagged ``sh``, ``bash`` or ``shell`` is a script: it runs whole, with
  ``bash -eo pipefail``, from the repository root;
- in a block tagged ``console``, each line that starts with ``$ `` is a command (with its
  ``\\`` continuation lines); the other lines are its output and are not checked;
- any other block (``yaml``, ``text``, untagged) is not run, and must not look like commands:
  a line starting with ``batchsim``, ``build/``, ``scripts/`` or ``$ `` there is an error (tag
  the block ``sh``, or ``console`` for a command with its output);
- the line ``<!-- docs-check: skip: REASON -->`` right before a block skips it; REASON is
  printed (for example: it needs an NVIDIA GPU, or a Slurm cluster);
- the line ``<!-- docs-check: same-output -->`` right before a ``console`` block makes the
  output it shows a claim: each shown line (trailing blanks aside) must appear in what the
  command prints, in the order shown, and a line ``...`` stands for any lines. Show only what a
  rerun gives to the digit (figures, not wall times), so that a change that moves a documented
  figure fails here until the page, and whatever quotes it, says the new one.

Before running anything it checks two things that need no command to run:

- links: every relative link of README.md and docs/*.md, ``](path)`` and ``](path#anchor)``
  (images included), names a file or folder that exists, and an anchor names a heading of the
  Markdown file it points into (GitHub's anchors: lower case, punctuation dropped, spaces as
  hyphens, ``-1``, ``-2`` for repeats);
- docs/options.md is what ``scripts/gen-cli-docs.py`` writes from the built binary's
  ``--help`` today (skipped with ``--list``, which needs no binary): whoever adds or changes an
  option regenerates the page.

The blocks run in document order, in a scratch copy of the repository (the files git tracks,
or would track), with the build folder linked in as ``build``: commands may write where a user
would (``results/``, a profile under ``hwmodel/profiles/``) without touching this checkout, and
a block may use what an earlier block of the same run wrote.

With ``--record DIR`` each command's output is also written to DIR (one file per command,
named by its place), so that two runs, before and after a change, can be compared with
``diff -r`` to find the documented outputs that the change moved (``--keep`` keeps the files
the commands wrote as well).

usage: scripts/check-docs.py [--build DIR] [--list] [--keep] [--record DIR] [--timeout S] [--only DOC|TEXT]
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
SAME_OUTPUT = re.compile(r"^<!--\s*docs-check:\s*same-output\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")
# Every link target (image or page), with its anchor: ](path), ](path#anchor), ](#anchor).
ANY_LINK = re.compile(r"\]\(<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
LOOKS_LIKE_COMMAND = re.compile(r"^\s*(\$ |batchsim\b|build/|scripts/)")


@dataclass
class Block:
    doc: Path
    line: int  # the line of the opening fence, 1-based
    tag: str
    text: str
    skip: str = ""
    commands: list = field(default_factory=list)
    outputs: list = field(default_factory=list)  # with same-output: each command's shown output

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


def front_docs():
    """README.md and the pages of docs/: the documents every link of which must hold."""
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def linked_docs(starts):
    """The documents given and the Markdown files they link to, transitively, inside the
    repository, in the order a reader following the links from the first one meets them; the
    pages no link reaches come after, in the order given."""
    seen, order, todo = set(), [], [starts[0]]
    rest = list(starts[1:])
    while todo or rest:
        if not todo:
            todo.append(rest.pop(0))
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
    """The commands of a console block, and the lines each is shown to print."""
    commands, outputs, current = [], [], None
    for line in text.splitlines():
        if current is not None:
            current.append(line)
            if not line.rstrip().endswith("\\"):
                commands.append("\n".join(current))
                outputs.append([])
                current = None
        elif line.startswith("$ "):
            current = [line[2:]]
            if not line.rstrip().endswith("\\"):
                commands.append(line[2:])
                outputs.append([])
                current = None
        elif outputs:
            outputs[-1].append(line)
    return commands, outputs


def output_mismatch(shown, output):
    """The first shown line that the output lacks (in order; ``...`` matches any lines), or
    None when every shown line is there."""
    actual = [line.rstrip() for line in output.splitlines()]
    at = 0
    for line in shown:
        line = line.rstrip()
        if line in ("...", ""):
            continue
        while at < len(actual) and actual[at] != line:
            at += 1
        if at == len(actual):
            return line
        at += 1
    return None


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
        same_output = start > 0 and SAME_OUTPUT.match(lines[start - 1]) is not None
        block = Block(doc, start + 1, tag, "\n".join(body) + "\n", skip)
        if same_output and tag != "console":
            errors.append(f"{doc.relative_to(ROOT)}:{start}: docs-check: same-output applies to "
                          f"a console block only, not one tagged '{tag or 'nothing'}'")
        if tag in RUN_TAGS:
            block.commands = [block.text]
        elif tag == "console":
            block.commands, outputs = console_commands(block.text)
            if same_output:
                block.outputs = outputs
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


def github_slug(heading):
    """The anchor GitHub gives a Markdown heading: inline markup and punctuation dropped, lower
    case, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.lower().replace("`", "")
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


_anchors = {}


def anchors_of(doc):
    """The anchors of a Markdown file: its headings' slugs (repeats numbered as GitHub does)
    and any <a name=...>/<a id=...>; headings inside fenced blocks do not count."""
    if doc not in _anchors:
        found, counts, fence = set(), {}, None
        for line in doc.read_text(encoding="utf-8").splitlines():
            m = FENCE.match(line)
            if m:
                if fence is None:
                    fence = m.group(2)
                elif line.strip().startswith(fence):
                    fence = None
                continue
            if fence is not None:
                continue
            found.update(HTML_ANCHOR.findall(line))
            h = HEADING.match(line)
            if h:
                base = github_slug(h.group(2))
                n = counts.get(base, 0)
                counts[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        _anchors[doc] = found
    return _anchors[doc]


def link_errors(doc):
    """Every relative link of a document (outside fenced blocks and inline code) that names a
    missing file or folder, or a missing heading."""
    errors, fence = [], None
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(2)
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is not None:
            continue
        for target in ANY_LINK.findall(re.sub(r"`[^`]*`", "``", line)):
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            where = f"{doc.relative_to(ROOT)}:{number}"
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                errors.append(f"{where}: the link ]({target}) names no file")
            elif anchor and file.suffix == ".md" and anchor not in anchors_of(file):
                errors.append(f"{where}: the link ]({target}) names no heading of "
                              f"{file.relative_to(ROOT) if ROOT in file.parents else file}")
    return errors


def options_page_errors(build):
    """docs/options.md against what scripts/gen-cli-docs.py writes from this build's --help."""
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-cli-docs.py"), "--build",
                        str(build), "--check"], capture_output=True, text=True)
    if r.returncode == 0:
        return []
    diff = "\n     ".join((r.stdout + r.stderr).rstrip().splitlines()[-40:])
    return [f"docs/options.md differs from the CLI's --help; regenerate it with "
            f"`python3 scripts/gen-cli-docs.py --build {build}` and commit it:\n     {diff}"]


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
    ap.add_argument("--only", default="", help="run only the blocks of this document (README.md, "
                    "docs/usage.md), or else those whose place (FILE:LINE) contains this")
    ap.add_argument("--python", default="", help="the python3 the commands run (the one the batchsim "
                    "module in build/python was built for; default: the build's, from its "
                    "CMakeCache.txt, else python3 on PATH)")
    args = ap.parse_args(argv)

    docs = linked_docs(front_docs())
    blocks, errors = [], []
    for doc in front_docs():
        errors += link_errors(doc)
    for doc in docs:
        b, e = blocks_of(doc)
        blocks += b
        errors += e
    if args.only:
        # A document's path runs that document; anything else, the blocks whose place contains it.
        if any(str(d.relative_to(ROOT)) == args.only for d in docs):
            blocks = [b for b in blocks if str(b.doc.relative_to(ROOT)) == args.only]
        else:
            blocks = [b for b in blocks if args.only in b.where]
    print(f"check-docs: {len(docs)} documents, {len(blocks)} command blocks "
          f"({sum(1 for b in blocks if b.skip)} skipped)")
    if args.list:
        for b in blocks:
            print(f"  {b.where} [{b.tag}]" + (f" skipped: {b.skip}" if b.skip else "")
                  + (" same-output" if b.outputs else ""))
        for e in errors:
            print(f"check-docs: error: {e}")
        return 1 if errors else 0

    build = Path(args.build)
    if not (build / "experiments" / "batchsim").exists():
        print(f"check-docs: error: no batchsim binary under {build} (build first)", file=sys.stderr)
        return 2
    errors += options_page_errors(build)
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
                missing = output_mismatch(b.outputs[k], output) if rc == 0 and b.outputs else None
                if missing is not None:
                    print(f"FAIL {b.where} ({seconds:.1f} s): {first}")
                    print(f"     the page shows a line this command no longer prints:\n       {missing}")
                    tail = "\n".join(output.rstrip().splitlines()[-15:])
                    print("     it printed (last lines):\n     " + tail.replace("\n", "\n     "))
                    print("     update the page to today's output, and every figure quoted from it")
                    failed.append(b.where)
                elif rc == 0:
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
        print(f"check-docs: {len(failed)} failing block(s){': ' if failed else ''}{', '.join(failed)}; "
              f"{len(errors)} other error(s) (untagged commands, broken links, a stale docs/options.md)")
        return 1
    print("check-docs: every link holds, docs/options.md matches the CLI, every documented command ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
