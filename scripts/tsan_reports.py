#!/usr/bin/env python3
"""Sorts ThreadSanitizer reports (the log files of scripts/tsan.sh) into ours and the C
client's own, prints a summary, and exits 1 if any report is ours.

A report is the C client's own when every access it names (data race) or every stack
it shows (other kinds) has its first frame outside the sanitizer runtime inside the
vendored C client's source (`zookeeper-client-c/`): a race between two of the C client's
own threads, or between one of them and a C API call that is documented as
thread-safe. Any access whose first frame is in Rust code (this workspace or the
standard library it calls) makes the report ours.

    scripts/tsan_reports.py LOG...
"""
import re
import sys
from collections import Counter

C_CLIENT = "zookeeper-client-c/"
RUNTIME = re.compile(r"(__tsan_|/compiler-rt/|tsan_interceptors|sanitizer_common)")
FRAME = re.compile(r"^\s+#(\d+) (.*)$")
SECTION = re.compile(
    r"^\s+(Write|Read|Previous write|Previous read|Atomic \w+|Previous atomic \w+|"
    r"Mutex .* acquired|Mutex .* created|Thread .* created|Location is|"
    r"Cycle in lock order|Call)"
)


def reports(text):
    for block in text.split("==================\n"):
        if "WARNING: ThreadSanitizer:" in block:
            yield block


def first_frames(block):
    """The first non-runtime frame of each stack in the report, with its section."""
    frames = []
    section, found = None, True
    for line in block.splitlines():
        if SECTION.match(line):
            section, found = line.strip(), False
            continue
        m = FRAME.match(line)
        if m and section and not found and not RUNTIME.search(m.group(2)):
            if section.startswith(("Location is", "Thread ", "Mutex ")):
                found = True  # allocation/creation sites say nothing about who races
                continue
            frames.append((section, m.group(2)))
            found = True
    return frames


def where(frame):
    """`function file:line` of a frame line, shortened."""
    frame = re.sub(r" \(\S+\+0x[0-9a-f]+\)( \(BuildId: [0-9a-f]+\))?$", "", frame)
    frame = re.sub(r"^0x[0-9a-f]+ ", "", frame)
    frame = re.sub(r"/\S*/(zookeeper-client-c/|zookeeper-mt/|zookeeper-mt-recipes/|library/)", r"\1", frame)
    return frame


def main(paths):
    ours, theirs = [], Counter()
    for path in paths:
        with open(path, errors="replace") as f:
            for block in reports(f.read()):
                kind = re.search(r"WARNING: ThreadSanitizer: (.*?)(?: \(pid=\d+\))?$", block, re.M)
                kind = kind.group(1) if kind else "?"
                frames = first_frames(block)
                if frames and all(C_CLIENT in frame for _, frame in frames):
                    key = " / ".join(sorted({where(f).split(" ")[0] for _, f in frames}))
                    theirs[f"{kind}: {key}"] += 1
                else:
                    ours.append((path, kind, frames, block))
    print(f"ThreadSanitizer: {sum(theirs.values())} report(s) inside the C client, "
          f"{len(ours)} involving our code")
    for key, count in theirs.most_common():
        print(f"  C client  {count:4d} x {key}")
    for path, kind, frames, block in ours:
        print(f"\n== ours: {kind} ({path})")
        for section, frame in frames:
            print(f"  {section}\n      {where(frame)}")
    if ours:
        print("\nFull text of the first report of ours:\n" + ours[0][3])
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
