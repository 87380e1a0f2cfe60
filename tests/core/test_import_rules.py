"""Who may import whom (DESIGN.md section 1, "Layout"): this test owns the rule.

Three checks, each reading one thing:
- the contract: the paragraph "Who may import whom" of ../shared/DESIGN.md (beside
  the repository, as CI places it) is parsed clause by clause, and the arrows it
  states must be the table `ALLOWED` below, so the table and the text cannot drift
  apart silently (skipped, with the reason, where ../shared is not beside the repo);
- the code: every module of the rafka package is parsed with `ast`, and every
  import in it (module level, function level, `if` branches alike) is an arrow
  from its layer to the imported module's layer; an arrow the table does not allow
  fails, naming file and line;
- the running code: the layers that never import Ray (`core`, `protocol`, `client`)
  are imported in a fresh interpreter and must load no Ray module, which catches
  what `ast` cannot see (a dependency that pulls Ray in, an `importlib` call).
"""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rafka

pytestmark = pytest.mark.core

PACKAGE_DIR = Path(rafka.__file__).resolve().parent
REPO = PACKAGE_DIR.parent
DESIGN = REPO.parent / "shared" / "DESIGN.md"

RAY = "Ray"                 # the `ray` package, and `raydp` (Spark on Ray), which imports it
FACES = "faces"
LAYERS = ("core", "protocol", "placement", "actors", "client", "spark_bridge", "verify")
# The entry points. DESIGN names `cli`, `cluster`, `demo`; the others are their parts:
# `cli_groups`, `cli_acls`, `cli_records` and `cli_transactions` (commands of `cli`), `cluster_errors`
# (errors of `cluster` and `cli`),
# `quiet` (the output redirection of `cli` and `demo`), and the package's __init__,
# which hands out `cluster`'s entry points.
FACE_MODULES = ("cli", "cluster", "demo", "cli_groups", "cli_acls", "cli_configs", "cli_records", "cli_transactions",
                "cli_partitions", "cli_features",
                "cluster_errors", "quiet", "__init__")

# layer -> what it may import besides itself. FACES may import anything.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "protocol": frozenset({"core"}),
    "placement": frozenset({"core", RAY}),
    "actors": frozenset({"protocol", "placement", "core", RAY}),
    "client": frozenset({"protocol", "core"}),
    "spark_bridge": frozenset({"client", "protocol", "core", RAY}),
    "verify": frozenset({"client", "protocol", "core", RAY}),
}
# Arrows DESIGN allows one module of a layer (its parenthetical "a member actor may
# use `client`"): module path under rafka/ -> the extra layers.
EXCEPTIONS: dict[str, frozenset[str]] = {
    "actors/member.py": frozenset({"client"}),
}
# Arrows the code still has that DESIGN does not allow: each is a debt, named with
# why it is still here. The check fails on any other arrow, and on one listed here
# that is gone (so the list only shrinks). (file under rafka/, imported module)
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {
    ("verify/__init__.py", "rafka"):
        "EmbeddedCluster starts rafka.local_cluster (a face): the cli should hand it the cluster",
    ("verify/faults.py", "rafka.placement.brokers.live_broker_ids"):
        "the live brokers from Ray's node table: to be asked of the controller or handed in",
    ("verify/workload.py", "rafka.actors.member.handling_generation"):
        "the member actor's handler context: to move to the client side of group membership",
}
# DESIGN's text names Ray only where a layer may or may never import it. Section 1
# puts Ray's users in `actors` ("Ray actors") and `placement` ("placement groups"):
# they may import it though the paragraph does not say so; `protocol` may not, as
# `client`, which may never load Ray, imports it.
RAY_BY_LAYOUT = frozenset({"actors", "placement"})


# --- the contract ---------------------------------------------------------------------

def import_rules_paragraph(design: str) -> str:
    section = design.split("## 1. Layout", 1)[1].split("\n## ", 1)[0]
    start = section.index("Who may import whom")
    return " ".join(section[start:].split("\n\n", 1)[0].split())


def split_outside_parentheses(text: str, separator: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        depth += (char == "(") - (char == ")")
        if char == separator and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    return parts + ["".join(current)]


def named(text: str) -> set[str]:
    """The layers a phrase names: backquoted names, and Ray by name."""
    names = {n.strip() for n in re.findall(r"`([^`]+)`", text)}
    names = {RAY if n == "ray" else n for n in names}
    if re.search(r"\bRay\b", text):
        names.add(RAY)
    return names


@pytest.fixture(scope="module")
def design_text() -> str:
    if not DESIGN.is_file():
        pytest.skip(f"the contract is not beside the repository: {DESIGN} is missing")
    return DESIGN.read_text()


def parse_rules(paragraph: str) -> tuple[dict[str, set[str]], dict[str, set[str]],
                                          dict[str, list[str]]]:
    """(allowed, never, notes): per layer the names a clause lets it import, the
    names after its "never", and its parenthetical notes."""
    body = paragraph.split(":", 1)[1]                   # after "Who may import whom, ... :"
    body = split_outside_parentheses(body, ".")[0]      # the rules end with the first sentence
    allowed: dict[str, set[str]] = {}
    never: dict[str, set[str]] = {}
    notes: dict[str, list[str]] = {}
    for clause in split_outside_parentheses(body, ";"):
        subjects_text, verb, objects_text = re.split(r"\b(imports?)\b", clause, maxsplit=1)
        subjects = named(re.sub(r"\(([^)]*)\)", r"\1", subjects_text)) - {RAY}
        notes_here = re.findall(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)", objects_text)
        plain = re.sub(r"\((?:[^()]|\([^()]*\))*\)", "", objects_text)
        may, _, may_not = plain.partition("never")
        if "anything" in may:
            names = {"*"}
        elif "nothing of rafka" in may:
            names = set()
        else:
            names = named(may)
        for subject in subjects:
            allowed[subject] = names
            never[subject] = named(may_not)
            notes[subject] = notes_here
    return allowed, never, notes


def test_the_table__is_the_arrows_design_states(design_text):
    section = design_text.split("## 1. Layout", 1)[1].split("\n## ", 1)[0]
    allowed, never, notes = parse_rules(import_rules_paragraph(design_text))

    assert set(allowed) == set(LAYERS) | {"cli", "cluster", "demo"}
    for face in ("cli", "cluster", "demo"):
        assert allowed[face] == {"*"} and face in FACE_MODULES
    for layer in LAYERS:
        assert ALLOWED[layer] - {RAY} == allowed[layer] - {RAY}, layer
        assert not (ALLOWED[layer] & never[layer]), layer
        if RAY in allowed[layer]:
            assert RAY in ALLOWED[layer], layer
        elif layer in RAY_BY_LAYOUT:
            assert RAY in ALLOWED[layer] and RAY not in never[layer], layer
        else:
            assert RAY not in ALLOWED[layer], layer
    # `core` never imports `ray`, said in the paragraph before.
    assert RAY not in ALLOWED["core"] and "`core` never imports `ray`" in section
    assert "Ray actors" in section and "placement groups" in section   # RAY_BY_LAYOUT
    # `protocol` may not import Ray because `client` may never, and imports it.
    assert RAY in never["client"] and "protocol" in ALLOWED["client"]

    # Each "may use `x`" note is one exception in the table, for the module it names.
    stated = {(layer, name) for layer, layer_notes in notes.items() for note in layer_notes
              for name in named(" ".join(re.findall(r"may use ([^,;)]*)", note)))}
    assert stated == {(path.split("/")[0], layer)
                      for path, extra in EXCEPTIONS.items() for layer in extra}
    for path in EXCEPTIONS:
        layer = path.split("/")[0]
        mention = Path(path).stem
        assert any(mention in note for note in notes[layer]), path


# --- the code -------------------------------------------------------------------------

def layer_of_module(dotted: str) -> str | None:
    """The layer of an imported module: a rafka layer, FACES, RAY, or None (outside)."""
    parts = dotted.split(".")
    if parts[0] in ("ray", "raydp"):
        return RAY
    if parts[0] != "rafka":
        return None
    if len(parts) == 1 or parts[1] in FACE_MODULES:
        return FACES
    return parts[1] if parts[1] in LAYERS else f"unknown rafka module {dotted}"


def layer_of_file(path: Path, package_dir: Path) -> str:
    relative = path.relative_to(package_dir)
    if len(relative.parts) == 1:
        if relative.stem not in FACE_MODULES:
            raise AssertionError(f"rafka/{relative} is in no layer: name it in FACE_MODULES "
                                 "or move it into a layer")
        return FACES
    if relative.parts[0] not in LAYERS:
        raise AssertionError(f"rafka/{relative.parts[0]}/ is no layer of DESIGN section 1")
    return relative.parts[0]


def parsed(path: Path, attempts: int = 3) -> ast.Module:
    """The file's AST. CPython 3.11 (3.11.7 here) keeps the AST constructor's
    recursion depth in the interpreter's state, shared by every thread, so a parse
    racing another thread's in this process can fail with "SystemError: AST
    constructor recursion depth mismatch" (CPython gh-106905, seen there in
    threaded programs): a full CI run saw it once, with earlier tests' threads
    still running. The parse is tried again; any other
    error, or this one every time, fails the test."""
    for attempt in range(attempts):
        try:
            return ast.parse(path.read_text(), filename=str(path))
        except SystemError as error:
            if "recursion depth mismatch" not in str(error) or attempt == attempts - 1:
                raise


def imported_modules(path: Path, package_dir: Path) -> list[tuple[int, str]]:
    """(line, module) for every import statement anywhere in the file; `from a import b`
    counts as `a.b`, which is `a`'s layer either way."""
    package_parts = ["rafka", *path.relative_to(package_dir).parent.parts]
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[:len(package_parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def forbidden_arrows(package_dir: Path, known: dict = {}) -> list[str]:
    """"file:line: from -> to (module)" for each arrow not allowed and not `known`,
    and "known but gone: ..." for each `known` arrow no longer in the code."""
    bad, seen = [], set()
    for path in sorted(package_dir.rglob("*.py")):
        source_layer = layer_of_file(path, package_dir)
        if source_layer == FACES:
            continue
        relative = path.relative_to(package_dir).as_posix()
        allowed = ALLOWED[source_layer] | EXCEPTIONS.get(relative, frozenset()) | {source_layer}
        for line, module in imported_modules(path, package_dir):
            target = layer_of_module(module)
            if target is not None and target not in allowed:
                if (relative, module) in known:
                    seen.add((relative, module))
                else:
                    bad.append(f"rafka/{relative}:{line}: {source_layer} -> {target} ({module})")
    return bad + [f"known but gone: {arrow}" for arrow in sorted(set(known) - seen)]


def test_every_import_in_rafka__is_an_arrow_design_allows():
    assert forbidden_arrows(PACKAGE_DIR, KNOWN_VIOLATIONS) == []


def test_the_check__sees_function_level_and_relative_imports(tmp_path):
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "__init__.py").write_text("")
    (tmp_path / "client" / "bad.py").write_text(
        "from . import retry\n"
        "from ..actors import replica\n"
        "def later():\n"
        "    import ray.util\n")
    assert forbidden_arrows(tmp_path) == [
        "rafka/client/bad.py:2: client -> actors (rafka.actors.replica)",
        "rafka/client/bad.py:4: client -> Ray (ray.util)",
    ]


# --- the running code -----------------------------------------------------------------

NO_RAY_LAYERS = [layer for layer in LAYERS if RAY not in ALLOWED[layer]]
CHECK = ("import importlib, sys\n"
         "for name in sys.argv[1:]: importlib.import_module(name)\n"
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'raydp'))[:5])\n")


def modules_of(layers: list[str]) -> list[str]:
    names = []
    for layer in layers:
        package = __import__(f"rafka.{layer}", fromlist=["_"])
        names += [package.__name__] + sorted(
            m.name for m in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."))
    return names


def ray_loaded_by(modules: list[str]) -> list[str]:
    """The Ray modules a fresh interpreter holds after importing `modules`."""
    run = subprocess.run([sys.executable, "-c", CHECK, *modules], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr
    return eval(run.stdout)     # a list of module names, printed by CHECK


def test_importing_the_layers_without_ray__loads_no_ray_module():
    assert NO_RAY_LAYERS == ["core", "protocol", "client"]
    modules = modules_of(NO_RAY_LAYERS)
    assert {"rafka.core.log", "rafka.protocol.connection", "rafka.client.admin"} <= set(modules)
    loaded = ray_loaded_by(modules)
    if loaded:      # name the culprits: each module alone, in its own interpreter
        culprits = [m for m in modules if ray_loaded_by([m])]
        pytest.fail(f"{culprits} load Ray ({loaded})")


def test_the_running_check__sees_a_module_that_loads_ray():
    assert ray_loaded_by(["rafka.core.log"]) == []
    assert ray_loaded_by(["rafka.core.log", "rafka.placement.groups"]) != []
