"""Every Python example of README.md and docs/*.md is complete and runs; every manage.py command
line of their shell blocks uses options the command has. tests/docs/blocks.py has the markers;
a failure names the page, the block's line and what is wrong."""

from __future__ import annotations

import builtins
import contextlib
import copy
import importlib
import importlib.util
import re
import shlex
import symtable
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.management import get_commands, load_command_class
from django.db import transaction
from django.test import override_settings

from tests.docs import blocks as docs

PYTHON = docs.python_blocks()
SHELL = docs.shell_blocks()
# Modules whose module-level registries an example fills (handlers, schedules, subscriptions):
# saved before each example and put back after it, so examples do not meet each other's.
REGISTRIES = ("django_lonnymq.registry", "django_lonnymq.schedules", "django_lonnymq.topics")
# Emptied while an example runs, as in the reader's new project (the sample project's own
# handlers for queues such as transcode and reports would refuse the example's).
EMPTIED = {
    "django_lonnymq.registry": ("_handlers", "_timeouts"),
    "django_lonnymq.schedules": ("_declarations",),
    "django_lonnymq.topics": ("_declared",),
}
SIGNALS = ("message_started", "message_finished", "message_dead")
# The quickstart's app is imported as ``videos`` in the examples, as in the reader's project.
ALIASES = {"videos": "example_project.videos"}


def ids(items: list[docs.Block]) -> list[str]:
    return [b.where for b in items]


def named(block: docs.Block, name: str) -> docs.Block:
    for other in docs.blocks(block.path):
        if other.path == block.path and other.line < block.line and other.marker.get("name") == name:
            return other
    raise AssertionError(f"{block.where}: continues {name!r}, but no earlier block of the page is named so")


def chain(block: docs.Block) -> list[docs.Block]:
    """The block and the blocks it continues, first one first."""
    if "continues" in block.marker:
        return [*chain(named(block, block.marker["continues"])), block]
    return [block]


def undefined_names(source: str, filename: str, given: set[str]) -> set[str]:
    """Names the code reads that nothing in it defines or imports (nor builtins, nor ``given``),
    at module level and in its functions and classes alike, from Python's own symbol tables."""
    top = symtable.symtable(source, filename, "exec")
    defined = {
        s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()
    }
    known = defined | set(dir(builtins)) | given | {"__name__", "__file__"}
    missing: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            global_read = table is top or symbol.is_global()
            if symbol.is_referenced() and global_read and symbol.get_name() not in known:
                missing.add(symbol.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return missing


class StandIn:
    """What a ``needs`` name stands for: any attribute, call, item or context is another one."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> StandIn:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return StandIn(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> StandIn:
        return StandIn(f"{self._name}()")

    def __getitem__(self, key: Any) -> StandIn:
        return StandIn(f"{self._name}[{key!r}]")

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return f"<stand-in {self._name}>"


@contextlib.contextmanager
def registries_kept() -> Iterator[None]:
    # Not autodiscover(): it would mark the handler modules discovered for the rest of the
    # session, and in-process workers of later tests would then sync schedules.
    saved = {}
    for name in REGISTRIES:
        module = importlib.import_module(name)
        saved[name] = {
            k: copy.copy(v) if isinstance(v, (dict, list, set)) else v
            for k, v in vars(module).items()
            if not k.startswith("__")
        }
    from django_lonnymq import signals

    receivers = {name: list(getattr(signals, name).receivers) for name in SIGNALS}
    for name, attributes in EMPTIED.items():
        for attribute in attributes:
            getattr(importlib.import_module(name), attribute).clear()
    try:
        yield
    finally:
        for name, kept in receivers.items():  # a receiver an example connected
            signal = getattr(signals, name)
            signal.receivers[:] = kept
            signal.sender_receivers_cache.clear()
        for name, values in saved.items():
            module = importlib.import_module(name)
            for key, value in values.items():
                current = getattr(module, key)
                if isinstance(value, list) and isinstance(current, list):
                    current[:] = value
                elif isinstance(value, (dict, set)) and type(current) is type(value):
                    current.clear()
                    current.update(value)
                else:
                    setattr(module, key, value)


@contextlib.contextmanager
def modules_for(block: docs.Block) -> Iterator[None]:
    """``videos`` is the quickstart app; ``django.tasks`` is the django-tasks backport on Django
    5.2 (as docs/tasks.md says); a ``needs`` module that is not installed is a stand-in."""
    added = {}
    for alias, real in ALIASES.items():
        module = importlib.import_module(real)
        added[alias] = module
        for sub in ("models", "views", "handlers"):
            added[f"{alias}.{sub}"] = importlib.import_module(f"{real}.{sub}")
    if importlib.util.find_spec("django.tasks") is None:
        added["django.tasks"] = importlib.import_module("django_tasks")
    for name in block.needs:  # a module the block imports, such as reports.models
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix not in added and importlib.util.find_spec(parts[0]) is None:
                module = types.ModuleType(prefix)
                module.__getattr__ = StandIn(prefix).__getattr__  # type: ignore[method-assign]
                module.__path__ = []  # a package, so that its submodules import
                added[prefix] = module
    before = {name: sys.modules.get(name) for name in added}
    sys.modules.update(added)
    try:
        yield
    finally:
        for name, previous in before.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous


class RolledBack(Exception):
    pass


def settings_namespace() -> dict[str, Any]:
    from tests import settings

    return {k: copy.deepcopy(v) for k, v in vars(settings).items() if k.isupper()}


# An example module's name: django.tasks asks that a task's function be importable by it.
EXAMPLE_MODULE = "docs_example"


def run(parts: list[docs.Block]) -> None:
    last = parts[-1]
    namespace: dict[str, Any] = {"__name__": EXAMPLE_MODULE}
    if "settings" in parts[0].marker:
        namespace.update(settings_namespace())
    for name in last.needs:
        if name.isidentifier():
            namespace[name] = StandIn(name)
    module = types.ModuleType(EXAMPLE_MODULE)
    module.__dict__.update(namespace)
    sys.modules[EXAMPLE_MODULE] = module
    tasks = copy.deepcopy(settings.TASKS)
    for backend in tasks.values():  # an example's @task may name its own queue
        backend["QUEUES"] = []
    try:
        with modules_for(last), registries_kept(), override_settings(TASKS=tasks):
            try:
                with transaction.atomic():  # what an example writes is rolled back
                    for part in parts:
                        exec(compile(part.padded(), str(part.path), "exec"), module.__dict__)
                    raise RolledBack
            except RolledBack:
                pass
    finally:
        sys.modules.pop(EXAMPLE_MODULE, None)


def test_the_pages_have_examples_and_every_marker_is_above_a_block() -> None:
    assert len(PYTHON) > 20, "the extraction found almost nothing: has the fence syntax changed?"
    assert docs.orphan_markers() == []


@pytest.mark.parametrize("block", PYTHON, ids=ids(PYTHON))
def test_python_example_is_complete(block: docs.Block) -> None:
    assert block.marker_error is None, f"{block.where}: {block.marker_error}"
    parts = chain(block)
    try:
        compile(block.padded(), str(block.path), "exec")
    except SyntaxError as error:
        pytest.fail(f"{block.where}: does not compile: {error.msg} (line {error.lineno} of the page)")
    source = "\n".join(part.source for part in parts)
    given = {name for name in block.needs if name.isidentifier()}
    if "settings" in parts[0].marker:
        given |= set(settings_namespace())
    missing = undefined_names(source, block.where, given)
    assert not missing, (
        f"{block.where}: uses {', '.join(sorted(missing))} without defining or importing it; import it "
        f"in the block, or list the reader's own names in '<!-- example: needs ... -->' above it"
    )
    if block.example_file:
        path = docs.ROOT / "example_project" / block.example_file
        body = block.source.split("\n", 1)[1]  # after the file comment
        assert body.strip() == path.read_text().strip(), (
            f"{block.where}: differs from example_project/{block.example_file}, the file the tests run"
        )


RUNNABLE = [b for b in PYTHON if "compile-only" not in b.marker and not b.example_file]


@pytest.mark.django_db
@pytest.mark.parametrize("block", RUNNABLE, ids=ids(RUNNABLE))
def test_python_example_runs(block: docs.Block) -> None:
    """Each example runs in a fresh namespace of the sample project (tests/settings.py on the test
    database), in a transaction rolled back after it; handlers and schedules it declares are
    forgotten after it (the sample project's own are set aside meanwhile)."""
    try:
        run(chain(block))
    except Exception as error:  # noqa: BLE001 - reported with the page's line
        tb = error.__traceback__
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == str(block.path):
                line = tb.tb_lineno
            tb = tb.tb_next
        at = f" at line {line} of the page" if line else ""
        pytest.fail(f"{block.where}: raised {type(error).__name__}{at}: {error}")


SAMPLE_PAGE = """\
<!-- example: name setup -->
```python
from django_lonnymq import enqueue

ids = [enqueue("sample", {"n": n}, channel="a") for n in range(3)]
```

<!-- example: continues setup -->

```python
from django_lonnymq import api

assert len(ids) == 3 and api.cancel(ids) is not None
```

<!-- example: needs charge; settings -->
```python
DATABASES["default"]["OPTIONS"] = {"application_name": charge.name}
```

<!-- example: compile-only: needs a cluster -->
```python
cluster.start()
```

```python
result = undefined_thing(1)
```

<!-- example: colour blue -->
```python
x = 1
```
"""


def test_the_markers_mean_what_contributing_md_says(tmp_path: Any, db: None) -> None:
    page = tmp_path / "sample.md"
    page.write_text(SAMPLE_PAGE)
    setup, continued, needs, compile_only, broken, unknown = docs.blocks(page)
    assert [b.line for b in chain(continued)] == [setup.line, continued.line]
    from django_lonnymq import registry, schedules

    handlers, discovered = dict(registry._handlers), schedules._discovered
    run(chain(continued))  # ids comes from the block it continues
    # Nothing of the session's state changes: handlers, and whether the handler modules were
    # discovered (in-process workers of later tests sync schedules only once they were).
    assert registry._handlers == handlers and schedules._discovered is discovered
    with pytest.raises(NameError):
        run([continued])
    assert needs.needs == ["charge"] and "settings" in needs.marker
    run([needs])
    assert undefined_names(needs.source, "s", {"charge", "DATABASES"}) == set()
    assert compile_only.marker["compile-only"] == "needs a cluster"
    assert undefined_names(compile_only.source, "s", set()) == {"cluster"}
    assert undefined_names(broken.source, "s", set()) == {"undefined_thing"}
    assert unknown.marker_error is not None and "colour" in unknown.marker_error
    (tmp_path / "stray.md").write_text("<!-- example: settings -->\n\nsome text\n")
    stray = tmp_path / "stray.md"
    assert docs.orphan_markers([page, stray]) == ["stray.md:1: example marker not followed by a code block"]


# ---------------------------------------------------------------- shell blocks


def command_words(text: str) -> list[str]:
    """The words from the command's name on, up to a shell operator."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        words = text.split()
    for at, word in enumerate(words):
        if word.endswith("manage.py"):
            words = words[at + 1 :]
            break
    rest = []
    for word in words:
        if word in ("|", "||", "&&", ";", "&") or word.startswith((">", "2>", "<")):
            break
        rest.append(word)
    return rest


def command_lines(block: docs.Block) -> list[tuple[int, list[str]]]:
    """(page line, words after ``manage.py``) for each command line naming manage.py."""
    found = []
    logical, start = "", 0
    for offset, text in enumerate(block.source.split("\n"), 1):
        if not logical:
            start = block.line + offset
        logical += text
        if text.endswith("\\"):
            logical = logical[:-1] + " "
            continue
        text, logical = logical, ""
        for command in re.split(r"&&|\|\||;", text):  # make dist && pip install ... && manage.py x
            if re.search(r"manage\.py\s+\w", command.split("#")[0]):
                found.append((start, command_words(command)))
    return found


MANAGE_LINES = [(b, line, words) for b in SHELL for line, words in command_lines(b)]


def options_of(command: str) -> set[str]:
    app = get_commands()[command]
    parser = load_command_class(app, command).create_parser("manage.py", command)
    return {option for action in parser._actions for option in action.option_strings}


# Inline spans name this app's commands only (docs/tasks.md quotes another package's db_worker).
INLINE = [(page, line, command_words(text)) for page, line, text in docs.inline_commands()]


@pytest.mark.parametrize(
    ("page", "line", "words"), INLINE, ids=[f"{p.relative_to(docs.ROOT)}:{n}" for p, n, _ in INLINE]
)
def test_inline_command_uses_real_options(page: Any, line: int, words: list[str]) -> None:
    where = f"{page.relative_to(docs.ROOT)}:{line}"
    command = words[0]
    if get_commands().get(command) != "django_lonnymq":
        assert not command.startswith(("lonnymq_", "run_queue_worker")), f"{where}: no command {command!r}"
        return
    options = options_of(command)
    unknown = [w.split("=")[0] for w in words[1:] if w.startswith("-") and w.split("=")[0] not in options]
    assert not unknown, f"{where}: manage.py {command} has no option {', '.join(unknown)}"


def test_the_shell_blocks_name_manage_py_commands() -> None:
    names = {words[0] for _, _, words in MANAGE_LINES}
    assert {"run_queue_worker", "lonnymq_stats"} <= names, names


@pytest.mark.parametrize(
    ("block", "line", "words"), MANAGE_LINES, ids=[f"{b.where}@{line}" for b, line, _ in MANAGE_LINES]
)
def test_manage_py_command_line_uses_real_options(block: docs.Block, line: int, words: list[str]) -> None:
    where = f"{block.path.relative_to(docs.ROOT)}:{line}"
    command = words[0]
    assert command in get_commands(), f"{where}: manage.py has no command {command!r}"
    options = options_of(command)
    unknown = [w.split("=")[0] for w in words[1:] if w.startswith("-") and w.split("=")[0] not in options]
    assert not unknown, f"{where}: manage.py {command} has no option {', '.join(unknown)}"
