#!/usr/bin/env python3
"""Every #include of ours must be allowed by the room table of docs/DESIGN.md.

A room is a folder with one idea and one CMake target (docs/DESIGN.md, "Rooms and who may
include whom"). Each row of the table names a room and the rooms it may include; a room may
also include, transitively, whatever those may include, and always itself. A file belongs to
the deepest room whose folder holds it. This script reads the table, walks the sources that git
knows, and prints every include that crosses the layering the wrong way, naming the file, the
line and the rule; it exits 1 if there is any.

    scripts/check-layering.py [REPO_ROOT]
"""
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
design = root / "docs" / "DESIGN.md"
text = design.read_text()
try:
    table = text[text.index("<!-- rooms:"):text.index("<!-- end rooms -->")]
except ValueError:
    sys.exit(f"{design}: no room table between '<!-- rooms:' and '<!-- end rooms -->'")

may = {}  # room -> rooms it names
everything = False
for lineno, line in enumerate(table.splitlines(), 1):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 3 or not cells[0].startswith("`"):
        continue
    room = cells[0].strip("`").rstrip("/")
    if cells[2] == "everything":
        may[room] = None
        continue
    may[room] = [r.rstrip("/") for r in re.findall(r"`([^`]+)`", cells[2])]
for room, targets in may.items():
    for t in targets or []:
        if t not in may:
            sys.exit(f"{design}: room '{room}' may include '{t}', which is no room of the table")


def closure(room, seen=None):
    seen = set() if seen is None else seen
    if room in seen:
        return seen
    seen.add(room)
    for t in may[room] or []:
        closure(t, seen)
    return seen


allowed = {room: (None if targets is None else closure(room)) for room, targets in may.items()}
rooms = sorted(may, key=len, reverse=True)


def room_of(path):
    for room in rooms:
        if path == room or path.startswith(room + "/"):
            return room
    return None


files = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"],
                       capture_output=True, text=True, check=True).stdout.split()
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
bad = 0
checked = 0
for f in files:
    if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
        continue
    src = room_of(f)
    if src is None:
        print(f"{f}: in no room of {design.relative_to(root)}'s table", file=sys.stderr)
        bad += 1
        continue
    if allowed[src] is None:
        continue
    for n, line in enumerate((root / f).read_text(errors="replace").splitlines(), 1):
        m = include.match(line)
        if not m:
            continue
        target = m.group(1)
        dst = room_of(target)
        if dst is None:
            continue  # a header beside the file or a generated one, not a room's
        checked += 1
        if dst not in allowed[src]:
            print(f"{f}:{n}: room {src}/ may not include {target} (room {dst}/): "
                  f"{src}/ may include {', '.join(sorted(r + '/' for r in allowed[src]))}",
                  file=sys.stderr)
            bad += 1
print(f"check-layering: {checked} includes of ours in {len(files)} files checked against "
      f"{len(may)} rooms; {bad} not allowed")
sys.exit(1 if bad else 0)
