"""Every code block of the documentation (README.md and docs/) runs as written, or says why not.

A block is one of:

- marked ``<!-- tested: <tag> (<test>) -->``: that test runs it (the test must exist and
  name the tag or the page);
- marked ``<!-- not run: <reason> -->``: nothing runs it, for the reason given;
- unmarked, checked here by its language:

  - ``python``: it compiles, and its imports of Python's library, Django and this package
    resolve (an import of the reader's own modules, ``shop.models``, is theirs); a block
    that uses no name it does not define is executed, in a test process of its own, inside
    a transaction rolled back; a ``PQJOBS`` it defines passes the package's system checks;
    a ``def`` of a public function of the package has that function's parameters;
  - ``sql``: runs on the migrated test database, in a transaction rolled back;
  - ``bash``: each ``manage.py`` command line parses with that command's own parser (a
    synopsis's ``[optional parts]`` dropped); ``pip install`` names extras the package has;
    a script of the repository exists; ``python -c`` runs;
  - ``yaml`` and ``ini``: parse;
  - ``text``: output, a tree or a diagram, shown and not run.

A block without a language, or of another one, fails: give it one, or a mark.
"""

from __future__ import annotations

import ast
import builtins
import configparser
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib

import django
import psycopg
import pytest
import yaml
from django.core.management import get_commands, load_command_class
from django.db import connection

import django_pqjobs
from tests.helpers import ROOT, DocBlock, bound, doc_blocks, documented_files

BLOCKS = [block for path in documented_files() for block in doc_blocks(path)]
CHECKED = ("python", "sql", "bash", "yaml", "ini", "text")
OURS = ("django_pqjobs", "django", "django_tasks")  # importable wherever the docs are read


def unmarked(language: str) -> list[DocBlock]:
    return [block for block in BLOCKS if block.mark is None and block.language == language]


def ids(blocks: list[DocBlock]) -> list[str]:
    return [f"{block.path}:{block.line}" for block in blocks]


def test_every_block_is_run_or_says_why_not():
    problems = []
    for block in BLOCKS:
        if block.mark == "not run" and not block.note:
            problems.append(f"{block}: 'not run' without a reason")
        elif block.mark == "tested":
            test = re.search(r"tests/\S+\.py", block.note)
            source = (ROOT / test.group()).read_text() if test else ""
            page = block.path.rsplit("/", 1)[-1]
            if not test or not (ROOT / test.group()).exists():
                problems.append(f"{block}: 'tested' names no test file")
            elif block.tag not in source and page not in source:
                problems.append(f"{block}: {test.group()} names neither {block.tag} nor {page}")
        elif block.mark is None and block.language not in CHECKED:
            problems.append(f"{block}: give it a language ({', '.join(CHECKED)}) or a mark")
    assert problems == []


def test_the_not_run_marks_are_few():
    not_run = [f"{block}: {block.note}" for block in BLOCKS if block.mark == "not run"]
    assert len(not_run) <= 8, not_run


# --- Python --------------------------------------------------------------------------------


def free_names(tree: ast.AST) -> set[str]:
    """The names a block uses without defining or importing them (anywhere in it)."""
    bound, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound - set(dir(builtins))


def imported(node: ast.AST) -> list[str]:
    """The modules an import statement imports (none for another statement)."""
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return [alias.name for alias in node.names] if isinstance(node, ast.Import) else []


def needs_newer_django(tree: ast.AST) -> bool:
    """Django's own Tasks framework (django.tasks) came with Django 6.0."""
    modules = [module for node in ast.walk(tree) for module in imported(node)]
    return django.VERSION < (6, 0) and any(m.startswith("django.tasks") for m in modules)


@pytest.mark.parametrize("block", unmarked("python"), ids=ids(unmarked("python")))
def test_a_python_block_compiles_and_its_imports_resolve(block: DocBlock):
    tree = ast.parse(block.code, filename=str(block))
    compile(tree, str(block), "exec")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or needs_newer_django(node):
            continue
        if isinstance(node, ast.ImportFrom) and node.level:  # the reader's app's own module
            continue
        if all(_ours(module) for module in imported(node)):
            exec(ast.unparse(node), {})  # an ImportError names what the docs got wrong


@pytest.mark.parametrize("block", unmarked("python"), ids=ids(unmarked("python")))
def test_a_documented_signature_is_the_function_s(block: DocBlock):
    import inspect

    tree = ast.parse(block.code)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in django_pqjobs.__all__:
            documented = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
            documented += [a.arg for a in [node.args.vararg] if a]
            documented += [a.arg for a in node.args.kwonlyargs]
            documented += [a.arg for a in [node.args.kwarg] if a]
            real = list(inspect.signature(getattr(django_pqjobs, node.name)).parameters)
            assert documented == real, f"{block}: {node.name}() takes {real}"


def self_contained(tree: ast.AST) -> bool:
    """Does the block define or import, from what is importable here, all it uses? (A model
    class belongs to the reader's app; a relative import to the reader's package.)"""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or not _ours(node.module or "")):
            return False
        if isinstance(node, ast.Import) and not all(_ours(a.name) for a in node.names):
            return False
        if isinstance(node, ast.ClassDef) and "models.Model" in map(ast.unparse, node.bases):
            return False
    return not free_names(tree) and not needs_newer_django(tree)


def _ours(module: str) -> bool:
    return module.split(".")[0] in set(sys.stdlib_module_names) | set(OURS)


SELF_CONTAINED = [block for block in unmarked("python") if self_contained(ast.parse(block.code))]

# Run in a process of its own (the blocks declare job types: they must not join the test
# process's registry): each block in a transaction rolled back, its PQJOBS through the checks.
RUNNER = """
import json, sys, traceback, types
import django
django.setup()
from django.conf import settings
from django.core import checks
from django.db import transaction
from django.test import override_settings

# The reader's own job types (enqueued by a block that does not declare them) are theirs.
ours = {**settings.PQJOBS, "ALLOW_UNKNOWN_JOB_TYPES": True}
# E033: a hook's dotted path that does not import (the docs name the reader's module).
READERS = {"pqjobs.E033"}

def pqjobs_errors():
    return {m.id for m in checks.run_checks() if (m.id or "").startswith("pqjobs.")
            and m.level >= checks.ERROR} - READERS

baseline = pqjobs_errors()
failures = {}
for number, (name, code) in enumerate(json.loads(sys.stdin.read()).items()):
    try:
        # a module, as the reader's jobs.py or tasks.py is (a task is found by its path)
        module = sys.modules[f"docs_block_{number}"] = types.ModuleType(f"docs_block_{number}")
        namespace = module.__dict__
        with override_settings(PQJOBS=ours), transaction.atomic():
            exec(compile(code, name, "exec"), namespace)
            transaction.set_rollback(True)
        if "PQJOBS" in namespace:  # settings: the documented values on the test's own
            with override_settings(PQJOBS={**settings.PQJOBS, **namespace["PQJOBS"]}):
                new = pqjobs_errors() - baseline
            assert not new, f"PQJOBS fails the checks: {sorted(new)}"
    except BaseException:
        failures[name] = traceback.format_exc(limit=-3)
print(json.dumps(failures))
"""


@pytest.mark.django_db(transaction=True)
def test_the_self_contained_python_blocks_run():
    assert len(SELF_CONTAINED) >= 15  # the test runs many, not none
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PQJOBS_TEST_DATABASE": str(connection.settings_dict["NAME"]),
    }
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps({str(block): block.code for block in SELF_CONTAINED}),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=bound(120),
    )
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout.splitlines()[-1])
    assert failures == {}, "\n".join(f"{name}:\n{error}" for name, error in failures.items())


# --- SQL -----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("block", unmarked("sql"), ids=ids(unmarked("sql")))
def test_a_sql_block_runs_on_a_migrated_database(block: DocBlock):
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params) as conn:
        try:
            # the roles a GRANT or REVOKE names: the package's, made by the grants block
            # (tested in test_least_privilege.py), and the reader's login roles
            roles = set(re.findall(r"\bpqjobs_\w+_role\b", block.code))
            for names in re.findall(r"\b(?:TO|FROM)\s+(\w+(?:,\s*\w+)*)\s*;", block.code):
                roles.update(re.split(r",\s*", names))
            for role in sorted(roles):
                conn.execute(
                    f"DO $$ BEGIN CREATE ROLE {role} NOLOGIN; "  # rolled back below
                    "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
                )
            conn.execute(block.code)  # type: ignore[call-overload]
        finally:
            conn.rollback()


# --- shell ---------------------------------------------------------------------------------

MANAGE = re.compile(r"^(?:\S+/)?(?:python\S* )?manage\.py (\S+)(.*)$")
SCRIPT = re.compile(r"^(?:\w+=\S+ )*(?:bash|\S*python\S*) ((?:scripts|benchmarks)/\S+)")
PIP = re.compile(r'^pip install "django-pqjobs\[([\w,]+)\]"')


def check_shell_line(line: str) -> None:
    """One line of a bash block, as its kind allows."""
    if manage := MANAGE.match(line):
        name, rest = manage.groups()
        args = shlex.split(re.sub(r"\[[^\]]*\]", "", rest), comments=True)
        app = get_commands().get(name)
        assert app, f"manage.py has no command {name!r}"
        command = load_command_class(app, name)
        command.create_parser("manage.py", name).parse_args(args)  # CommandError if wrong
    elif script := SCRIPT.match(line):
        assert (ROOT / script.group(1)).is_file(), f"{script.group(1)} does not exist"
    elif pip := PIP.match(line):
        extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        missing = set(pip.group(1).split(",")) - set(extras["optional-dependencies"])
        assert not missing, f"the package has no extras {sorted(missing)}"
    elif line.startswith("python -c "):
        done = subprocess.run(
            [sys.executable, *shlex.split(line, comments=True)[1:]],
            capture_output=True,
            text=True,
            timeout=bound(60),
        )
        assert done.returncode == 0, done.stderr
    elif line.startswith(("createdb ", "psql ")):
        pass  # PostgreSQL's own tools; the quickstart's test runs createdb
    else:
        raise AssertionError(f"no check for {line!r}: mark its block <!-- not run: why -->")


@pytest.mark.parametrize("block", unmarked("bash"), ids=ids(unmarked("bash")))
def test_a_shell_block_s_commands_are_this_package_s(block: DocBlock):
    for line in block.code.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            check_shell_line(line.strip())


# --- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize("block", unmarked("yaml"), ids=ids(unmarked("yaml")))
def test_a_yaml_block_parses(block: DocBlock):
    assert yaml.safe_load(block.code)


@pytest.mark.parametrize("block", unmarked("ini"), ids=ids(unmarked("ini")))
def test_an_ini_block_parses(block: DocBlock):
    parser = configparser.ConfigParser(interpolation=None, comment_prefixes=("#", ";"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(block.code)
    assert parser.sections()
