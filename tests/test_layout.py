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


def lab_imports(path):
    """``line: module`` of every import of ``path`` (at any depth: a function's lazy import counts) that
    reaches the lab."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [(node.lineno, n) for n in names if lab_import(n)][:1]
    return [f"{line}: {name}" for line, name in sorted(found)]


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
