#!/usr/bin/env python3
"""The layer rule of docs/architecture.md, checked over every #include line.

- framework/src/: every source is in a concern's folder; a private include names its folder
  ("bus/channels.hpp") and points down or into its own folder, never up:
  support < interop < state < data < bus < checkpoint < distributed < loop < trainer. The fit loop's
  header is for the fit loop and the facade (trainer/) alone: the other parts read the fit's
  position from the checkpoint format (checkpoint/fit_position.hpp).
- callbacks/src/: support (what several built-ins share) < one group per kind (loggers, report,
  schedules, averaging, metrics, run_control, finetuning; a group includes no other group) < the top level
  (add_default_callbacks, the umbrella's compile check).
- The libraries: framework/ includes nothing of torchbus::callbacks; neither library includes
  apps/ or benchmarks/ (a quoted include of theirs resolves inside their own src/).

Usage: check_layers.py [ROOT]      checks the tree at ROOT (default: this repository)
       check_layers.py --self-test  shows that each rule fails on a tree that breaks it
Exit status 0 when every include keeps the rules, 1 with one line per broken one.
"""

import pathlib
import re
import sys
import tempfile

FRAMEWORK_LAYERS = ["support", "interop", "state", "data", "bus", "checkpoint", "distributed", "loop",
                    "trainer"]
# Private headers only some folders may include, beyond the layer rule.
RESTRICTED = {"loop/fit_loop.hpp": ("loop/fit_loop.cpp", "trainer/")}
CALLBACK_GROUPS = ["loggers", "report", "schedules", "averaging", "metrics", "run_control",
                   "finetuning"]
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


def sources(folder):
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES)


def includes(path):
    """(line number, '<' or '"', target) of every #include of `path`."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for match in INCLUDE.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2)


def check_framework(root, problems):
    src = root / "framework" / "src"
    rank = {name: i for i, name in enumerate(FRAMEWORK_LAYERS)}
    for path in sources(src):
        relative = path.relative_to(src)
        where = f"framework/src/{relative}"
        if len(relative.parts) != 2 or relative.parts[0] not in rank:
            problems.append(f"{where}: not in a concern's folder ({', '.join(FRAMEWORK_LAYERS)})")
            continue
        own = relative.parts[0]
        for line, kind, target in includes(path):
            if kind == "<":
                if target.startswith("torchbus/callbacks/"):
                    problems.append(f"{where}:{line}: includes <{target}>: the framework does not "
                                    "depend on torchbus::callbacks")
                continue
            folder = target.split("/")[0]
            if folder not in rank or not (src / target).is_file():
                problems.append(f"{where}:{line}: includes \"{target}\", which is no private "
                                "header of framework/src named by its folder (\"bus/channels.hpp\")")
            elif rank[folder] > rank[own]:
                problems.append(f"{where}:{line}: includes \"{target}\": {own}/ may include "
                                f"{' '.join(FRAMEWORK_LAYERS[:rank[own] + 1])}, not {folder}/ "
                                "(an include up the layers)")
            elif target in RESTRICTED and not str(relative).startswith(RESTRICTED[target]):
                problems.append(f"{where}:{line}: includes \"{target}\", which only "
                                f"{' and '.join(RESTRICTED[target])} may include")


def check_callbacks(root, problems):
    src = root / "callbacks" / "src"
    for path in sources(src):
        relative = path.relative_to(src)
        where = f"callbacks/src/{relative}"
        own = relative.parts[0] if len(relative.parts) == 2 else None
        if len(relative.parts) > 2 or (own and own != "support" and own not in CALLBACK_GROUPS):
            problems.append(f"{where}: not in a group (support, {', '.join(CALLBACK_GROUPS)}) "
                            "or at the top level")
            continue
        for line, kind, target in includes(path):
            if kind == "<":
                continue
            folder = target.split("/")[0] if "/" in target else None
            if not (src / target).is_file() or folder is None:
                problems.append(f"{where}:{line}: includes \"{target}\", which is no private "
                                "header of callbacks/src named by its group")
            elif own == "support" and folder != "support":
                problems.append(f"{where}:{line}: includes \"{target}\": support/ is what the "
                                "groups share and includes no group")
            elif own in CALLBACK_GROUPS and folder not in ("support", own):
                problems.append(f"{where}:{line}: includes \"{target}\": a group includes "
                                f"support/ and its own folder, not {folder}/")


def check(root):
    problems = []
    check_framework(root, problems)
    check_callbacks(root, problems)
    return problems


def write(root, relative, text):
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def self_test():
    """Each rule on a small tree that keeps it, then on one that breaks it."""
    good = {
        "framework/src/support/a.hpp": "",
        "framework/src/bus/b.hpp": '#include "support/a.hpp"\n#include <torchbus/state.hpp>\n',
        "framework/src/loop/c.cpp": '#include "bus/b.hpp"\n#include "loop/d.hpp"\n',
        "framework/src/loop/d.hpp": "",
        "framework/src/loop/fit_loop.hpp": "",
        "framework/src/trainer/t.cpp": '#include "loop/fit_loop.hpp"\n',
        "callbacks/src/support/s.hpp": "",
        "callbacks/src/loggers/l.cpp": '#include "support/s.hpp"\n',
        "callbacks/src/top.cpp": '#include "loggers/l.hpp"\n',
        "callbacks/src/loggers/l.hpp": "",
    }
    breaks = {
        "an include up the layers": ("framework/src/support/a.hpp", '#include "bus/b.hpp"\n'),
        "a source at the top of framework/src": ("framework/src/loose.cpp", ""),
        "an unknown folder": ("framework/src/misc/m.cpp", ""),
        "an include without its folder": ("framework/src/loop/c.cpp", '#include "d.hpp"\n'),
        "the framework on the callbacks": (
            "framework/src/bus/b.hpp", "#include <torchbus/callbacks/timer.hpp>\n"),
        "the fit loop's header outside the fit loop and the facade": (
            "framework/src/loop/c.cpp", '#include "loop/fit_loop.hpp"\n'),
        "a group including another": (
            "callbacks/src/loggers/l.cpp", '#include "report/r.hpp"\n'),
        "support including a group": (
            "callbacks/src/support/s.hpp", '#include "loggers/l.hpp"\n'),
    }
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        root = pathlib.Path(scratch) / "good"
        for relative, text in good.items():
            write(root, relative, text)
        if check(root):
            failures.append(f"the good tree was refused: {check(root)}")
        for what, (relative, text) in breaks.items():
            root = pathlib.Path(scratch) / re.sub(r"\W+", "_", what)
            for name, content in good.items():
                write(root, name, content)
            write(root, "callbacks/src/report/r.hpp", "")
            write(root, relative, text)
            found = check(root)
            print(f"self-test: {what}: {found[0] if found else 'NOT FOUND'}")
            if not found:
                failures.append(f"{what} was not found")
    for failure in failures:
        print(f"self-test failed: {failure}")
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[2])
    problems = check(root)
    for problem in problems:
        print(problem)
    counted = len(sources(root / "framework" / "src")) + len(sources(root / "callbacks" / "src"))
    print(f"layers: {counted} sources, {len(problems)} include(s) against the layers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
