"""Enforces docs/design.md's import layering and issue 18's structure by walking the source.

protocol <- storage <- retention/compaction <- broker; the clients (tidelog) build on
protocol only; spark_connector uses protocol and tidelog; storage never imports trio,
prometheus_client or broker. Every check reads the source with `ast` (no import runs),
and imports inside functions or under TYPE_CHECKING count like any other: a lazy
import is still a dependency. One check starts a fresh interpreter to see which
modules a real import loads.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> project packages it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "tidelog": {"protocol"},
    "storage": {"protocol"},
    "retention": {"protocol", "storage"},
    "compaction": {"protocol", "storage", "retention"},
    # The CLI commands act as clients (tidelog); the request path must not (see below).
    "broker": {"protocol", "storage", "retention", "compaction", "tidelog"},
    "spark_connector": {"protocol", "tidelog"},
    "pyspark_tidelog": {"spark_connector", "protocol"},
    # The harness (child servers, ports, a third-party codec) serves bench/, interop/ and
    # tests/ alike, so neither of the first two needs the other's internals.
    "harness": set(),
    "interop": {"harness", "protocol"},
    "bench": {
        "harness",
        "interop",
        "protocol",
        "storage",
        "retention",
        "compaction",
        "broker",
        "tidelog",
        "spark_connector",
    },
}
PROJECT_PACKAGES = set(ALLOWED)
# What ships in the wheel: the size limits below apply to it, not to the harnesses.
PRODUCT_PACKAGES = PROJECT_PACKAGES - {"harness", "interop", "bench"}

# Inside broker/, only the CLI acts as a client: the daemon never imports tidelog.
CLIENT_USERS_IN_BROKER = "broker.cli"

# package -> third-party top-level modules it must never import
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "protocol": {"prometheus_client", "structlog", "trio"},
    "tidelog": {"prometheus_client", "structlog"},
    "storage": {"trio", "prometheus_client"},
    "retention": {"trio", "prometheus_client"},
    "compaction": {"trio", "prometheus_client"},
    "spark_connector": {"trio", "prometheus_client"},
}

# Only this module may import prometheus_client (components expose statistics()).
PROMETHEUS_OWNER = "broker/metrics.py"

# The broker's request path: loading these must load no client module.
REQUEST_PATH = ("broker.server", "broker.connection", "broker.native.requests", "broker.dispatch")

# Handlers answer typed requests; bytes and frames are the connection's business.
HANDLER_MODULE_PREFIX = "broker.handlers"
FRAMING_MODULE = "protocol.framing"

# Longer than a screen is a sign to split (docs/style.md §3); a hard limit past that.
FUNCTION_LINES_MAX = 80
# A class a reader cannot hold in one sitting holds more than one idea (issue 34).
CLASS_LINES_MAX = 400

# Import cycles between modules, each an SCC of the module graph: none is left
# (issue 18 removed storage.log <-> storage.recovery and broker.connection <->
# broker.handlers). Any cycle not listed fails the test, and so does a listed one
# that is gone (so the list cannot go stale).
KNOWN_CYCLES: set[frozenset[str]] = set()

# Functions over FUNCTION_LINES_MAX today, outside protocol/ and tidelog/ (other
# branches of issue 18 split them; the lead shrinks this set at merge). A function
# not listed fails the test, and so does a listed one now within the limit.
KNOWN_LONG_FUNCTIONS: set[str] = set()

# Classes over CLASS_LINES_MAX today (the lead shrinks this set as splits land); a class
# not listed fails the test, and so does a listed one now within the limit.
KNOWN_LARGE_CLASSES: set[str] = {
    "storage.log:Log",
}


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement's target, resolved to absolute names."""

    module: str  # the module named after `import` / `from`
    names: tuple[str, ...]  # the names of a `from` import; () for `import x`


def module_name(root: Path, path: Path) -> str:
    """`storage/log.py` -> `storage.log`; `storage/__init__.py` -> `storage`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_sources(root: Path, packages: set[str]) -> Iterator[tuple[str, Path]]:
    """(module name, path) of every source file of the given top-level packages."""
    for package in sorted(packages):
        pkg_dir = root / package
        if pkg_dir.is_dir():
            for path in sorted(pkg_dir.rglob("*.py")):
                yield module_name(root, path), path


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imports_of(tree: ast.Module, module: str, is_package: bool) -> list[Import]:
    """Every import in `tree`, lazy or not, with relative imports made absolute."""
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append(Import(target, names))
    return found


def top_levels(imports: list[Import]) -> set[str]:
    return {imp.module.split(".")[0] for imp in imports}


def layering_violations(root: Path) -> list[str]:
    problems: list[str] = []
    for module, path in package_sources(root, PROJECT_PACKAGES):
        package = module.split(".")[0]
        rel = path.relative_to(root).as_posix()
        imports = top_levels(imports_of(parse(path), module, path.name == "__init__.py"))
        for name in sorted(imports & PROJECT_PACKAGES - {package} - ALLOWED[package]):
            problems.append(f"{rel} imports {name}")
        for name in sorted(imports & FORBIDDEN_THIRD_PARTY.get(package, set())):
            problems.append(f"{rel} imports {name}")
        if "prometheus_client" in imports and rel != PROMETHEUS_OWNER:
            problems.append(f"{rel} imports prometheus_client (only {PROMETHEUS_OWNER} may)")
    return problems


def module_graph(root: Path, packages: set[str]) -> dict[str, set[str]]:
    """module -> project modules it imports.

    `from pkg import name` points at `pkg.name` when that is a module, else at `pkg`.
    Importing `a.b.c` also runs `a` and `a.b`, but those implicit edges are left out:
    a package's `__init__` re-exporting its submodules is not a cycle.
    """
    sources = dict(package_sources(root, packages))
    # A compiled module (its .pyi stub) is a module too, one that imports nothing.
    modules = sources.keys() | {
        module_name(root, stub) for package in packages for stub in (root / package).rglob("*.pyi")
    }
    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        targets: set[str] = set()
        for imp in imports_of(parse(path), module, path.name == "__init__.py"):
            if imp.module.split(".")[0] not in packages:
                continue
            submodules = {f"{imp.module}.{name}" for name in imp.names} & modules
            if len(submodules) < len(imp.names) or not imp.names:
                targets.add(_existing_prefix(imp.module, modules))
            targets |= submodules
        graph[module] = targets - {module}
    return graph


def _existing_prefix(name: str, modules: Collection[str]) -> str:
    """The longest prefix of a dotted `name` that is a module (`a.b.attr` -> `a.b`)."""
    parts = name.split(".")
    while len(parts) > 1 and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts)


def import_cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def private_imports(root: Path, packages: set[str]) -> list[str]:
    """`from other_pkg.mod import _name` (or a `_private` module) across top-level packages."""
    problems: list[str] = []
    for module, path in package_sources(root, packages):
        own = module.split(".")[0]
        for imp in imports_of(parse(path), module, path.name == "__init__.py"):
            if imp.module.split(".")[0] not in packages - {own}:
                continue
            private_parts = [p for p in imp.module.split(".") if _is_private(p)]
            private_names = [n for n in imp.names if _is_private(n)]
            for name in private_parts + private_names:
                problems.append(f"{module} imports {name} from {imp.module}")
    return problems


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def framing_in_handlers(root: Path) -> list[str]:
    graph = module_graph(root, PROJECT_PACKAGES)
    return [
        f"{module} imports {FRAMING_MODULE}"
        for module, targets in sorted(graph.items())
        if module.startswith(HANDLER_MODULE_PREFIX) and FRAMING_MODULE in targets
    ]


# Wire codecs and the connections that run them: a handler sees typed bodies only.
WIRE_CODEC_PREFIXES = (
    "protocol.framing",
    "protocol.envelope",
    "protocol.kafka",
    "broker.native",
    "broker.kafka",
    "broker.codecs",
    "broker.connection",
    "broker.wirecodec",
)


def codecs_in_handlers(root: Path) -> list[str]:
    found = [
        f"{module} imports {target}"
        for module, targets in sorted(module_graph(root, PROJECT_PACKAGES).items())
        if module.startswith(HANDLER_MODULE_PREFIX)
        for target in sorted(targets)
        if target.startswith(WIRE_CODEC_PREFIXES)
    ]
    for module, path in package_sources(root, {"broker"}):
        if module.startswith(HANDLER_MODULE_PREFIX) and "msgpack" in top_levels(
            imports_of(parse(path), module, path.name == "__init__.py")
        ):
            found.append(f"{module} imports msgpack")
    return found


def function_lengths(root: Path, packages: set[str]) -> dict[str, int]:
    """`module:qualname` -> lines from `def` to the last line of the body, every function."""
    lengths: dict[str, int] = {}
    for module, path in package_sources(root, packages):
        _collect_lengths(parse(path), f"{module}:", lengths)
    return lengths


def _collect_lengths(node: ast.AST, prefix: str, lengths: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + child.name
            assert child.end_lineno is not None
            lengths[name] = child.end_lineno - child.lineno + 1
            _collect_lengths(child, f"{name}.", lengths)
        elif isinstance(child, ast.ClassDef):
            _collect_lengths(child, f"{prefix}{child.name}.", lengths)
        else:
            _collect_lengths(child, prefix, lengths)


def long_functions(root: Path, packages: set[str]) -> dict[str, int]:
    return {
        name: lines
        for name, lines in function_lengths(root, packages).items()
        if lines > FUNCTION_LINES_MAX
    }


# -- the checks on this project -------------------------------------------------------


def test_project_respects_layering() -> None:
    assert layering_violations(ROOT) == []


def test_no_import_cycles_between_modules() -> None:
    cycles = import_cycles(module_graph(ROOT, PROJECT_PACKAGES))
    shown = "\n".join(" <-> ".join(sorted(cycle)) for cycle in sorted(cycles, key=sorted))
    assert cycles - KNOWN_CYCLES == set(), f"new import cycle(s); all cycles now:\n{shown}"
    assert KNOWN_CYCLES - cycles == set(), f"gone: remove from KNOWN_CYCLES; now:\n{shown}"


def test_allowed_package_graph_is_acyclic() -> None:
    """With every import inside ALLOWED (the test above), no package cycle can exist."""
    graph = {package: set(targets) for package, targets in ALLOWED.items()}
    assert import_cycles(graph) == set()


def clients_outside_the_cli(root: Path) -> list[str]:
    """broker modules other than the CLI's that import the client package."""
    return [
        f"{module} imports tidelog"
        for module, path in package_sources(root, {"broker"})
        if not (module == CLIENT_USERS_IN_BROKER or module.startswith(f"{CLIENT_USERS_IN_BROKER}."))
        and "tidelog" in top_levels(imports_of(parse(path), module, path.name == "__init__.py"))
    ]


def test_only_the_cli_imports_the_clients() -> None:
    assert clients_outside_the_cli(ROOT) == []


def test_client_checker_catches_the_daemon_importing_a_client(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "broker/cli/topics.py": "from tidelog.client import Client\n",
            "broker/server.py": "def f():\n    import tidelog.producer\n",
        },
    )
    assert clients_outside_the_cli(tmp_path) == ["broker.server imports tidelog"]


# The connection is the same for every protocol: it reaches codecs through the
# registry (broker/codecs.py) and imports no protocol's modules.
PROTOCOL_NEUTRAL = ("broker.connection", "broker.wirecodec")
PROTOCOL_MODULE_PREFIXES = (
    "broker.kafka",
    "broker.native",
    "protocol.kafka",
    "protocol.envelope",
    "protocol.schemas",
)


def protocols_named(root: Path) -> list[str]:
    graph = module_graph(root, PROJECT_PACKAGES)
    return [
        f"{module} imports {target}"
        for module in PROTOCOL_NEUTRAL
        for target in sorted(graph.get(module, ()))
        if target.startswith(PROTOCOL_MODULE_PREFIXES)
    ]


def test_the_connection_names_no_protocol() -> None:
    assert "broker.codecs" in module_graph(ROOT, {"broker"})["broker.connection"]
    assert protocols_named(ROOT) == []


def test_protocol_checker(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "broker/kafka/connection.py": "",
            "broker/connection.py": "from broker.kafka.connection import KAFKA\n",
            "broker/codecs.py": "from broker.kafka.connection import KAFKA\n",
        },
    )
    assert protocols_named(tmp_path) == ["broker.connection imports broker.kafka.connection"]


def test_codec_and_clients_have_no_cycle() -> None:
    """protocol and tidelog are this layer's own: no allowlist applies to them."""
    cycles = import_cycles(module_graph(ROOT, {"protocol", "tidelog"}))
    assert cycles == set()


def modules_loaded_by(statement: str, scratch: Path) -> list[str]:
    """Every module a fresh interpreter holds after `statement`, run from a scratch
    directory against the installed packages."""
    probe = f"{statement}\nimport sys\nprint(sorted(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=scratch,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return list(ast.literal_eval(out.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "statement",
    ["import storage, compaction, retention", f"import {', '.join(REQUEST_PATH)}"],
    ids=["storage-compaction-retention", "broker-request-path"],
)
def test_importing_loads_no_client_module(tmp_path: Path, statement: str) -> None:
    loaded = modules_loaded_by(statement, tmp_path)
    assert "protocol.batch" in loaded or "broker.server" in loaded  # the probe really ran
    clients = [name for name in loaded if name == "tidelog" or name.startswith("tidelog.")]
    assert clients == []


def test_the_clients_start_without_numpy(tmp_path: Path) -> None:
    """numpy's import (~100 ms, a third of a client's start) serves only the broker's
    validator: `import tidelog` (every CLI command, every Spark task) must not pay it."""
    loaded = modules_loaded_by("import tidelog, tidelog.aio", tmp_path)
    assert "tidelog.consumer_record" in loaded and "protocol.batch" in loaded
    assert [name for name in loaded if name == "numpy" or name.startswith("numpy.")] == []


def test_no_private_name_imported_across_packages() -> None:
    assert private_imports(ROOT, PROJECT_PACKAGES) == []


def test_fuzz_targets_do_not_depend_on_the_tests() -> None:
    """The atheris harness runs outside pytest; tests/ may use fuzz/, not the reverse."""
    imported = {
        module: top_levels(imports_of(parse(path), module, path.name == "__init__.py"))
        for module, path in package_sources(ROOT, {"fuzz"})
    }
    assert "protocol" in imported["fuzz.targets"]  # the walk sees what the targets import
    assert [module for module, names in imported.items() if "tests" in names] == []


def test_handlers_import_no_framing_module() -> None:
    assert framing_in_handlers(ROOT) == []


def test_handlers_import_no_wire_codec() -> None:
    assert codecs_in_handlers(ROOT) == []


def test_codec_checker(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "protocol/kafka/records.py": "",
            "broker/handlers/produce.py": "from protocol.kafka import records\n",
            "broker/handlers/fetch.py": "def f():\n    import msgpack\n",
            "broker/handlers/topics.py": "from protocol.batch import iter_headers\n",
        },
    )
    assert codecs_in_handlers(tmp_path) == [
        "broker.handlers.produce imports protocol.kafka.records",
        "broker.handlers.fetch imports msgpack",
    ]


def test_no_function_longer_than_the_limit() -> None:
    measured = long_functions(ROOT, PRODUCT_PACKAGES)
    shown = "\n".join(
        f"{lines:4d} lines  {name}" for name, lines in sorted(measured.items(), key=lambda i: -i[1])
    )
    print(f"functions over {FUNCTION_LINES_MAX} lines:\n{shown or '(none)'}")
    unlisted = set(measured) - KNOWN_LONG_FUNCTIONS
    assert unlisted == set(), f"over {FUNCTION_LINES_MAX} lines, not allowed:\n{shown}"
    stale = KNOWN_LONG_FUNCTIONS - set(measured)
    assert stale == set(), f"now short (remove from KNOWN_LONG_FUNCTIONS); measured:\n{shown}"


def class_lengths(root: Path, packages: set[str]) -> dict[str, int]:
    """`module:qualname` -> lines from `class` to its last line, every class."""
    lengths: dict[str, int] = {}
    for module, path in package_sources(root, packages):
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                lengths[f"{module}:{node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_no_class_larger_than_the_limit() -> None:
    measured = {
        name: lines
        for name, lines in class_lengths(ROOT, PRODUCT_PACKAGES).items()
        if lines > CLASS_LINES_MAX
    }
    shown = "\n".join(f"{lines:4d} lines  {name}" for name, lines in sorted(measured.items()))
    assert set(measured) - KNOWN_LARGE_CLASSES == set(), f"over {CLASS_LINES_MAX}:\n{shown}"
    stale = KNOWN_LARGE_CLASSES - set(measured)
    assert stale == set(), f"now small (remove from KNOWN_LARGE_CLASSES); measured:\n{shown}"


def test_class_length_checker(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(CLASS_LINES_MAX))
    write(tmp_path, {"storage/a.py": f"class Big:\n{body}class Small:\n    pass\n"})
    assert class_lengths(tmp_path, {"storage"}) == {
        "storage.a:Big": CLASS_LINES_MAX + 1,
        "storage.a:Small": 2,
    }


def test_no_long_function_in_codec_or_clients() -> None:
    assert long_functions(ROOT, {"protocol", "tidelog"}) == {}


# -- the checkers catch what they should ----------------------------------------------


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize(
    ("package", "line", "culprit"),
    [
        ("storage", "import trio", "trio"),
        ("storage", "from broker import cli", "broker"),
        ("storage", "import prometheus_client", "prometheus_client"),
        ("protocol", "from storage import log", "storage"),
        ("protocol", "from tidelog.client import Client", "tidelog"),
        ("tidelog", "from storage.log import Log", "storage"),
        ("storage", "from tidelog import Producer", "tidelog"),
        ("compaction", "import tidelog.consumer", "tidelog"),
        ("retention", "from tidelog.client import Client", "tidelog"),
        ("spark_connector", "import broker.cli", "broker"),
        ("retention", "from compaction import cleaner", "compaction"),
        ("interop", "from bench.peers import TidelogServer", "bench"),
        ("harness", "import interop.targets", "interop"),
    ],
)
def test_checker_catches_a_forbidden_import(
    tmp_path: Path, package: str, line: str, culprit: str
) -> None:
    write(tmp_path, {f"{package}/bad.py": f"def lazy() -> None:\n    {line}\n"})
    violations = layering_violations(tmp_path)
    assert f"{package}/bad.py imports {culprit}" in violations
    assert all(culprit in v for v in violations)


def test_checker_allows_the_clients_where_they_belong(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tidelog/client.py": "from protocol.framing import encode_frame\n",
            "spark_connector/reading.py": "from tidelog.client import Client\n",
            "broker/cli/produce.py": "from tidelog import Producer\n",
        },
    )
    assert layering_violations(tmp_path) == []


def test_cycle_finder_reports_each_cycle(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "storage/__init__.py": "from storage.log import Log\n",
            "storage/log.py": "def f():\n    from storage import recovery\n",
            "storage/recovery.py": "from storage.log import Log\n",
            "broker/__init__.py": "",
            "broker/a.py": "from . import b\n",
            "broker/b.py": "if False:\n    from .c import x\n",
            "broker/c.py": "import broker.a\n",
            "broker/d.py": "from broker.a import thing\n",
        },
    )
    cycles = import_cycles(module_graph(tmp_path, {"storage", "broker"}))
    assert cycles == {
        frozenset({"storage.log", "storage.recovery"}),
        frozenset({"broker.a", "broker.b", "broker.c"}),
    }


def test_private_import_checker(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "storage/log.py": "from protocol.batch import _HEADER, HEADER\n",
            "storage/segment.py": "from storage.log import _inner\n",  # same package: fine
            "tidelog/client.py": "from protocol._wire import thing\n",
            "broker/x.py": "def f():\n    from storage.log import __all__\n",
        },
    )
    assert private_imports(tmp_path, {"storage", "tidelog", "protocol", "broker"}) == [
        "storage.log imports _HEADER from protocol.batch",
        "tidelog.client imports _wire from protocol._wire",
    ]


def test_framing_checker(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "protocol/framing.py": "",
            "broker/handlers/produce.py": "from protocol import framing\n",
            "broker/connection.py": "from protocol.framing import encode_frame\n",
        },
    )
    assert framing_in_handlers(tmp_path) == ["broker.handlers.produce imports protocol.framing"]


def test_length_checker_measures_methods_and_nested_functions(tmp_path: Path) -> None:
    lines = [f"x{i} = {i}\n" for i in range(FUNCTION_LINES_MAX)]
    source = (
        "def long():\n"
        + "".join(f"    {line}" for line in lines)
        + "def short():\n    def inner():\n        pass\n"
        + "class C:\n    async def method(self):\n"
        + "".join(f"        {line}" for line in lines)
    )
    write(tmp_path, {"storage/a.py": source})
    assert long_functions(tmp_path, {"storage"}) == {
        "storage.a:long": FUNCTION_LINES_MAX + 1,
        "storage.a:C.method": FUNCTION_LINES_MAX + 1,
    }


# -- authorization: every API declared, broker.security on one side of the context ----
# (issue 34 item 5; kept apart from the checks above)

SECURITY_PACKAGE = "broker.security"
CONTEXT_MODULE = "broker.context"


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def sides_of(graph: dict[str, set[str]], package: str, module: str) -> tuple[set[str], set[str]]:
    """(the modules of `package` that `module` depends on, those that depend on `module`)."""
    members = {m for m in graph if m == package or m.startswith(f"{package}.")}
    below = reachable(graph, module) & members
    above = {m for m in members if module in reachable(graph, m)}
    return below, above


def test_security_sits_below_the_context_only() -> None:
    """The context holds the security state (`ctx.security`), so nothing of
    broker.security may depend on the context: applying it to requests is
    broker.authz's, above the context."""
    below, above = sides_of(module_graph(ROOT, PROJECT_PACKAGES), SECURITY_PACKAGE, CONTEXT_MODULE)
    assert "broker.security.service" in below  # the walk sees the context's side
    assert above == set(), f"broker.security modules above {CONTEXT_MODULE}: {sorted(above)}"


def test_sides_checker(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "broker/context.py": "from broker.security import state\n",
            "broker/security/__init__.py": "",
            "broker/security/state.py": "",
            "broker/security/gate.py": "from broker import helper\n",
            "broker/helper.py": "def f():\n    from broker.context import Context\n",
        },
    )
    graph = module_graph(tmp_path, {"broker"})
    below, above = sides_of(graph, "broker.security", "broker.context")
    assert (below, above) == ({"broker.security.state"}, {"broker.security.gate"})


def test_every_registered_api_declares_what_it_needs() -> None:
    """Both API tables: a row without a declaration is refused at run time
    (tests/broker/security/test_declarations.py); none may be left undeclared."""
    from broker import dispatch
    from broker.kafka import registry

    assert dispatch.undeclared() == []
    assert registry.undeclared(registry.KAFKA_APIS) == []
    assert set(registry.KAFKA_HANDLERS) == set(registry.KAFKA_APIS)


# -- the network layer sends what storage cut (issue 34) -------------------------------

# The modules that frame and send answers: they never walk, cut or fence batches.
NETWORK_MODULES = ("broker.fetch_send", "broker.connection", "broker.kafka")
# What walks a segment's batches: the scanner, the segment's reads and the read plan.
STORAGE_SCANNERS = frozenset(
    {
        "storage.scan",
        "storage.segment",
        "storage.segment_walk",
        "storage.segment_time",
        "storage.segment_recovery",
        "storage.read_plan",
    }
)


def scanner_imports_in_network_layer(root: Path) -> list[str]:
    graph = module_graph(root, PROJECT_PACKAGES)
    return [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if module in NETWORK_MODULES or module.startswith(f"{NETWORK_MODULES[-1]}.")
        for target in sorted(targets & STORAGE_SCANNERS)
    ]


def test_network_layer_imports_no_storage_scanner() -> None:
    assert scanner_imports_in_network_layer(ROOT) == []


def test_scanner_checker(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "storage/scan.py": "",
            "storage/record_source.py": "",
            "broker/fetch_send.py": "from storage.record_source import FileSpan\n",
            "broker/kafka/edge.py": "def f():\n    from storage.scan import SegmentScan\n",
            "broker/handlers/fetch.py": "from storage import scan\n",
        },
    )
    assert scanner_imports_in_network_layer(tmp_path) == ["broker.kafka.edge imports storage.scan"]
