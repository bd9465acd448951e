"""Imports go one way. This parses every module of the package and of the harness around it
(tests/import_graph.py, nothing is imported) and fails on an import cycle, on the package
importing the harness, on datapipe importing the converters outside the CLI, on an import up
the layers, and on a module over the line budget. Each failure says the rule and why it exists.

The exceptions below are known and tracked: each is listed by name with its reason, so that any
new violation fails, and each must still occur, so that a fixed one leaves the list.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.import_graph import Module, cycles, edges, read_modules

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("datapipe", "preprocess")  # what `pip install datapipe` installs
HARNESS = ("benchmarks", "tools", "examples", "tests")  # what only a checkout has
PARSED = (*PACKAGES, "benchmarks", "tools", "examples")
# The parts of datapipe that run the converters: the `convert` command, and the benchmark
# suite that measures it (and re-encodes the photos its peers read the way it does).
CONVERTER_USERS = ("datapipe.cli", "datapipe.suite")

# Lowest first: a module imports from its own layer and the layers below it, never above.
# "X.*" is the package X and everything in it; a name without it, that module alone. The
# converters sit right above the format they write: datapipe.format and the base modules are
# all they use.
LAYERS = (
    ("base", ("datapipe.errors", "datapipe.sizes", "datapipe.system", "datapipe.pass_hooks",
              "datapipe.wording")),
    ("format", ("datapipe.format.*",)),
    ("converters", ("preprocess.*",)),
    ("sampling", ("datapipe.sampling.*",)),
    ("loaders", ("datapipe.loader.*", "datapipe.text.*", "datapipe.image.*")),
    ("profiling", ("datapipe.profiling.*",)),
    # The suite measures the public API (`datapipe`) and runs by `datapipe bench --suite`.
    ("commands", ("datapipe", "datapipe.cli.*", "datapipe.bench", "datapipe.doctor",
                  "datapipe.inspection", "datapipe.suite.*")),
)

# A module this long does more than one thing: split it where its jobs part. The largest
# modules of datapipe/ and preprocess/ with one job each are about 350 lines.
LINE_BUDGET = 400

ALLOWED_CYCLES: dict[frozenset[str], str] = {}
ALLOWED_IMPORTS = {
    ("preprocess.image_ops", "datapipe.image.cpu_decode"):
        "the converter reads JPEG sizes and pixels with the loaders' libjpeg-turbo extension; "
        "the decoder's binding belongs below both (issue 26)",
}
OVER_BUDGET: dict[str, str] = {}

WHY = {
    "cycle": "modules that import each other cannot be read, tested or changed one at a time, "
             "and which of them runs first depends on who imported whom. Put the shared type "
             "or record in a module of its own, or move the factory up a layer.",
    "harness": "pip installs datapipe and preprocess alone: benchmarks/, tools/, examples/ and "
               "tests/ exist only in a checkout, so the import fails for every user. The "
               "harness builds on the package's public API, never the reverse.",
    "converters": "the converters build on datapipe.format; a loader, the profiler or a "
                  "library user must not need them or what they import. Only the `convert` "
                  "command and the benchmark suite (datapipe.cli, datapipe.suite) reach them.",
    "layer": "the layers run base -> format -> converters -> sampling -> loaders (loader, "
             "text, image) -> profiling -> commands (the CLI, the benchmark suite); a layer "
             "that imports one above it cannot be used or tested without it, and the two "
             "become one.",
    "budget": f"a module over {LINE_BUDGET} lines does more than one job: split it where the "
              "jobs part, so that each can be read whole.",
}


def layer_of(name: str) -> int | None:
    for index, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            package = pattern.removesuffix(".*")
            if name == package or (pattern.endswith(".*") and name.startswith(package + ".")):
                return index
    return None


def _top(name: str) -> str:
    return name.split(".")[0]


def cycle_problems(modules: dict[str, Module]) -> list[str]:
    return [f"import cycle: {cycle}\n  Why: {WHY['cycle']}" for cycle in cycles(edges(modules))
            if not any(cycle.modules <= allowed for allowed in ALLOWED_CYCLES)]


def _imports(modules: dict[str, Module]) -> Iterable:
    for module in modules.values():
        for imported in module.imports:
            if (imported.source, imported.target) not in ALLOWED_IMPORTS:
                yield imported


def harness_problems(modules: dict[str, Module]) -> list[str]:
    return [f"the package imports its harness: {i}\n  Why: {WHY['harness']}"
            for i in _imports(modules)
            if _top(i.source) in PACKAGES and _top(i.target) in HARNESS]


def converter_problems(modules: dict[str, Module]) -> list[str]:
    return [f"datapipe imports the converters outside the CLI: {i}\n  Why: {WHY['converters']}"
            for i in _imports(modules)
            if _top(i.source) == "datapipe" and _top(i.target) == "preprocess"
            and not any(_in(i.source, user) for user in CONVERTER_USERS)]


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def layer_problems(modules: dict[str, Module]) -> list[str]:
    problems = []
    for i in _imports(modules):
        low, high = layer_of(i.source), layer_of(i.target)
        if low is not None and high is not None and high > low:
            problems.append(f"an import up the layers: {i} ({LAYERS[low][0]} imports "
                            f"{LAYERS[high][0]})\n  Why: {WHY['layer']}")
    return problems


def unlayered(modules: dict[str, Module]) -> list[str]:
    return [f"{name} is in no layer: add it to LAYERS in {Path(__file__).name}, where its "
            "imports put it" for name in modules
            if _top(name) in PACKAGES and layer_of(name) is None]


def budget_problems(modules: dict[str, Module]) -> list[str]:
    return [f"{m.path.relative_to(ROOT) if m.path.is_relative_to(ROOT) else m.path} has "
            f"{m.lines} lines, over the budget of {LINE_BUDGET}\n  Why: {WHY['budget']}"
            for m in modules.values()
            if _top(m.name) in PACKAGES and m.lines > LINE_BUDGET and m.name not in OVER_BUDGET]


def _report(problems: list[str]) -> str:
    return "\n".join(problems)


# ---- the project ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project() -> dict[str, Module]:
    return read_modules(ROOT, PARSED, known=HARNESS)


def test_no_import_cycles(project: dict[str, Module]) -> None:
    problems = cycle_problems(project)
    assert not problems, _report(problems)


def test_the_package_never_imports_its_harness(project: dict[str, Module]) -> None:
    problems = harness_problems(project)
    assert not problems, _report(problems)


def test_datapipe_reaches_the_converters_only_from_the_cli(project: dict[str, Module]) -> None:
    problems = converter_problems(project)
    assert not problems, _report(problems)


def test_every_module_of_the_package_has_a_layer(project: dict[str, Module]) -> None:
    problems = unlayered(project)
    assert not problems, _report(problems)


def test_imports_go_down_the_layers(project: dict[str, Module]) -> None:
    problems = layer_problems(project)
    assert not problems, _report(problems)


def test_modules_keep_within_the_line_budget(project: dict[str, Module]) -> None:
    problems = budget_problems(project)
    assert not problems, _report(problems)


def test_every_exception_is_still_needed(project: dict[str, Module]) -> None:
    """A fixed exception leaves the lists, so that it cannot hide a new violation."""
    found = {(i.source, i.target) for m in project.values() for i in m.imports}
    groups = [c.modules for c in cycles(edges(project))]
    stale = [f"import {source} -> {target}" for source, target in ALLOWED_IMPORTS
             if (source, target) not in found]
    stale += [f"cycle {sorted(group)}" for group in ALLOWED_CYCLES
              if not any(found_group <= group for found_group in groups)]
    stale += [f"line budget of {name}" for name in OVER_BUDGET
              if name not in project or project[name].lines <= LINE_BUDGET]
    assert not stale, "no longer needed, remove from tests/test_layers.py: " + ", ".join(stale)


# ---- the checker itself, on small trees made for it -----------------------------------------


def _tree(root: Path, files: dict[str, str]) -> dict[str, Module]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in {p.parent for p in root.rglob("*.py")}:
        (folder / "__init__.py").touch()
    return read_modules(root, [p for p in PARSED if (root / p).is_dir()], known=HARNESS)


def test_a_cycle_through_a_lazy_relative_import_is_found(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {
        "datapipe/format/a.py": "from datapipe.format.b import B\n",
        "datapipe/format/b.py": "B = 1\n\n\ndef load():\n    from . import a\n    return a\n",
        "datapipe/format/c.py": "import datapipe.format.a\n",
    })
    problems = cycle_problems(modules)
    assert len(problems) == 1
    assert "import cycle: datapipe.format.a -> datapipe.format.b -> datapipe.format.a" in \
        problems[0]
    assert "Why: modules that import each other" in problems[0]


def test_a_new_module_in_an_allowed_cycle_fails(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    allowed = ["datapipe.format.x", "datapipe.format.y"]
    monkeypatch.setitem(ALLOWED_CYCLES, frozenset(allowed), "a cycle being taken apart")
    ring = [*allowed, "datapipe.sampling.new"]
    files = {name.replace(".", "/") + ".py": f"import {ring[(k + 1) % len(ring)]}\n"
             for k, name in enumerate(ring)}
    problems = cycle_problems(_tree(tmp_path, files))
    assert len(problems) == 1 and "datapipe.sampling.new" in problems[0]


def test_an_import_up_the_layers_is_found(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {
        "datapipe/loader/base.py": "X = 1\n",
        "datapipe/sampling/order.py": "def f():\n    from ..loader import base\n",
        "datapipe/loader/fine.py": "from datapipe.sampling.order import f\n",
        "preprocess/text.py": "from datapipe.sampling import order\n",
    })
    problems = layer_problems(modules)
    assert len(problems) == 2
    assert "datapipe.sampling.order:2 imports datapipe.loader.base (sampling imports loaders)" \
        in problems[0]
    assert "preprocess.text:1 imports datapipe.sampling.order (converters imports sampling)" \
        in problems[1]
    assert all("Why: the layers run base -> format" in p for p in problems)


def test_a_module_in_no_layer_is_found(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {"datapipe/newthing.py": "", "datapipe/format/x.py": ""})
    assert unlayered(modules) == [
        "datapipe.newthing is in no layer: add it to LAYERS in test_layers.py, where its "
        "imports put it"]


def test_imports_of_the_harness_and_the_converters_are_found(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {
        "datapipe/format/x.py": "import importlib\n\n"
                                "suite = importlib.import_module('benchmarks.runs')\n",
        "preprocess/text.py": "from tests.helpers import thing\n",
        "datapipe/loader/y.py": "from preprocess.text import convert\n",
        "datapipe/cli.py": "from preprocess.text import convert\n",
        "benchmarks/runs.py": "import datapipe.cli\n",
    })
    assert [p.splitlines()[0] for p in harness_problems(modules)] == [
        "the package imports its harness: datapipe.format.x:3 imports benchmarks.runs",
        "the package imports its harness: preprocess.text:1 imports tests.helpers"]
    assert [p.splitlines()[0] for p in converter_problems(modules)] == [
        "datapipe imports the converters outside the CLI: datapipe.loader.y:1 imports "
        "preprocess.text"]


def test_a_module_over_the_budget_is_found(tmp_path: Path) -> None:
    modules = _tree(tmp_path, {
        "datapipe/format/long.py": "x = 1\n" * (LINE_BUDGET + 1),
        "datapipe/format/full.py": "x = 1\n" * LINE_BUDGET,
        "benchmarks/long.py": "x = 1\n" * (LINE_BUDGET + 1),
    })
    problems = budget_problems(modules)
    assert len(problems) == 1
    assert f"long.py has {LINE_BUDGET + 1} lines, over the budget of {LINE_BUDGET}" in \
        problems[0]
