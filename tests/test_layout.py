"""The plugin is what ``--user-dir fairseq_plugins`` loads, and nothing more: the lab (``scripts/lab/``:
evaluation, offline bundle, corpora, analysis, plots) imports the plugin, never the reverse."""
import ast
import os
import subprocess
import sys
from pathlib import Path

from conftest import PLUGIN_DIR, REPO

LAB = ("evaluation", "offline", "corpora", "analysis", "viz")  # the folders that moved to scripts/lab/


def lab_import(name):
    """Whether an imported module name is the scripts package (the lab lives in it) or one of the lab's
    former places inside the plugin."""
    return (name == "scripts" or name.startswith("scripts.")
            or any(name == f"fairseq_plugins.{d}" or name.startswith(f"fairseq_plugins.{d}.") for d in LAB))


def matching_imports(path, wanted, from_names):
    """``line: module`` of every import of ``path`` (at any depth: a function's lazy import counts) one of
    whose names ``wanted`` accepts (the first such name); ``from_names(node)``: the names an absolute
    ``from ... import ...`` stands for."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = from_names(node)
        else:
            continue
        found += [(node.lineno, n) for n in names if wanted(n)][:1]
    return [f"{line}: {name}" for line, name in sorted(found)]


def lab_imports(path):
    """Every import of ``path`` that reaches the lab (``line: module``)."""
    return matching_imports(path, lab_import, lambda node: [node.module] + [f"{node.module}.{a.name}" for a in node.names])


def test_the_rule_sees_each_way_of_importing_the_lab(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom fairseq_plugins import shipped\n\ndef f():\n    from scripts.lab.evaluation "
                      "import corpus\n\nimport scripts.reference_run\nfrom scripts import lab\n"
                      "from fairseq_plugins.evaluation import generation\n")
    assert lab_imports(module) == ["5: scripts.lab.evaluation", "7: scripts.reference_run", "8: scripts",
                                   "9: fairseq_plugins.evaluation"]


def test_no_plugin_module_imports_the_lab_or_the_scripts():
    offenders = {str(p.relative_to(REPO)): found for p in sorted(Path(PLUGIN_DIR).rglob("*.py"))
                 if (found := lab_imports(p))}
    assert not offenders, ("the plugin must not import the lab (scripts/lab/) or the scripts; move what it needs "
                           f"at run time into fairseq_plugins/: {offenders}")


def test_loading_the_plugin_loads_no_script():
    # the repository root is the working directory, so scripts/ could be imported: it must not be
    check = ("import sys, pkgutil, importlib\nimport fairseq_plugins\n"
             "for m in pkgutil.walk_packages(fairseq_plugins.__path__, 'fairseq_plugins.'):\n"
             "    importlib.import_module(m.name)\n"
             "print(sorted(m for m in sys.modules if m == 'scripts' or m.startswith('scripts.')))\n")
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-2000:]


def test_the_plugin_holds_no_lab_folder():
    # a folder with Python files: a checkout older than the move may leave an untracked __pycache__ behind
    left = [d for d in LAB if any((Path(PLUGIN_DIR) / d).rglob("*.py"))]
    assert not left, f"fairseq_plugins/ holds {', '.join(left)}: the lab lives in scripts/lab/"
    assert all((REPO / "scripts" / "lab" / d / "__init__.py").is_file() for d in LAB)


COMMAND_LINES = 150  # a command is its parser plus a call into the lab: past this, its logic belongs in scripts/lab/


def command_imports(path):
    """``line: module`` of every import of ``path`` that reaches a command (``scripts.<name>``, or
    ``scripts.pipelines...``): anything under ``scripts`` but the lab."""
    def command(name):
        return name.startswith("scripts.") and not (name == "scripts.lab" or name.startswith("scripts.lab."))

    return matching_imports(path, command, lambda node: [f"{node.module}.{a.name}" for a in node.names]
                            if node.module == "scripts" else [node.module])


def test_the_command_rule_sees_each_way_of_importing_a_command(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from scripts.lab.evaluation import corpus\nfrom scripts import lab\n\ndef f():\n"
                      "    from scripts.reference_run import read_models\n\nimport scripts.benchmark\n"
                      "from scripts import distill\nfrom scripts.pipelines import wmt\n")
    assert command_imports(module) == ["5: scripts.reference_run", "7: scripts.benchmark", "8: scripts.distill",
                                       "9: scripts.pipelines"]


def test_no_lab_module_imports_a_command():
    offenders = {str(p.relative_to(REPO)): found for p in sorted((REPO / "scripts" / "lab").rglob("*.py"))
                 if (found := command_imports(p))}
    assert not offenders, ("the lab must not import a command of scripts/; move what it needs into scripts/lab/ "
                           f"and let the command import it from there: {offenders}")


def test_the_commands_stay_thin():
    commands = sorted((REPO / "scripts").glob("*.py")) + sorted((REPO / "scripts" / "pipelines").glob("*.py"))
    assert len(commands) > 20  # the rule reads the commands where they are
    long = {str(p.relative_to(REPO)): n for p in commands if (n := len(p.read_text().splitlines())) > COMMAND_LINES}
    assert not long, (f"a command is its parser plus a call into the lab (at most {COMMAND_LINES} lines): move the "
                      f"logic of {long} into scripts/lab/")


def import_graph(root, package="scripts"):
    """{module: the modules under ``root/package`` it imports (at any depth)}, by dotted name; ``from P import
    m`` is an import of the module P.m where that is a file, else of P."""
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (root / package).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                            for a in node.names}
        graph[name] = sorted(t for t in targets if t in files and t != name)
    return graph


def import_circles(graph):
    """Each circle of ``graph`` once, as the list of its modules from its smallest name."""
    circles = set()

    def walk(path):
        for nxt in graph[path[-1]]:
            if nxt == path[0]:
                circles.add(tuple(path))
            elif nxt > path[0] and nxt not in path:
                walk(path + [nxt])

    for start in sorted(graph):
        walk([start])
    return sorted(circles)


def test_the_circle_rule_finds_a_lazy_circle(tmp_path):
    (tmp_path / "scripts" / "lab").mkdir(parents=True)
    (tmp_path / "scripts" / "a.py").write_text("from scripts.lab import b\n")
    (tmp_path / "scripts" / "lab" / "b.py").write_text("def f():\n    from scripts.lab.c import x\n")
    (tmp_path / "scripts" / "lab" / "c.py").write_text("import scripts.a\nx = 1\n")
    assert import_circles(import_graph(tmp_path)) == [("scripts.a", "scripts.lab.b", "scripts.lab.c")]


def test_no_import_circle_in_the_scripts():
    circles = import_circles(import_graph(REPO))
    assert not circles, f"modules of scripts/ that import each other (move the shared name where it belongs): {circles}"


def test_no_import_circle_in_the_plugin():
    """``--drafter auto`` was a drafter the engine unwrapped, and auto.py and drafters/base.py imported each other."""
    circles = import_circles(import_graph(REPO, "fairseq_plugins"))
    assert not circles, f"modules of the plugin that import each other (move the shared name where it belongs): {circles}"


def unnamed_modules(package: Path):
    """The modules (and subpackages) of ``package`` that its ``__init__`` docstring, the package map,
    does not name as ``name``."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    modules = sorted(p.stem if p.is_file() else p.name for p in package.iterdir()
                     if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file())
    return [m for m in modules if f"``{m}``" not in doc]


def test_the_map_rule_finds_a_module_it_does_not_name(tmp_path):
    (tmp_path / "__init__.py").write_text('"""``kept`` does this."""\n')
    for name in ("kept.py", "added.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    assert unnamed_modules(tmp_path) == ["added", "sub"]


def test_the_decoding_package_map_names_every_module():
    """A contributor reads ``fairseq_plugins/decoding/__init__.py`` to find the part to change: a module
    added without a line there is missing from the map."""
    assert unnamed_modules(Path(PLUGIN_DIR) / "decoding") == []
