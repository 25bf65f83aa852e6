"""The notebooks under notebooks/: each runs top to bottom without error, and what is committed is what CI runs.

- Execution: a copy of each committed notebook, outputs cleared, runs in a fresh kernel of this interpreter
  (nbclient, via `notebooks/build.py`'s `execute`) in the test's own temporary directory (also the kernel's
  TMPDIR), one kernel per test, so `pytest -n 2` runs them side by side. Any cell that raises fails the test.
- Drift: the committed cells must be the cells `notebooks/build.py` writes; the committed outputs must come from
  one top-to-bottom run of exactly those cells (recorded digest, execution counts 1..n) and have the same kinds,
  cell by cell, as the fresh run (a printed line, a table, a PNG figure...). The values are not compared:
  timings and random ids differ from run to run. In the notebooks of `build.VALUES_COMPARED` (05, a real model)
  they are, except in the cells tagged `build.MODEL_OUTPUT_TAG`, whose text comes from the model and is not
  repeatable: there the kinds are compared and the cells' own assertions (which hold for any reply) run.
- A notebook of `build.REAL_MODEL` starts the llama.cpp server itself: its run is marked like the other tests
  using that server (slow, xdist group "llama").
- The issue's rules: the first cell says what the reader will learn; only the public API is imported; figures are
  committed as PNG.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from tests.llama_fixture import LLAMA_MARKS

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _load_build():
    spec = importlib.util.spec_from_file_location("lc_compaction_notebooks_build", NOTEBOOKS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


build = _load_build()
NAMES = list(build.NOTEBOOKS)
PUBLIC = re.compile(r"^lc_compaction(\.report|\.integrations(\.\w+)?|\.testing\.llama_server)?$")
"""Modules a notebook may import from the package: the top level, the reports, the front doors, the local model."""


def _runs(names: list[str]) -> list:
    """The names as parameters, those that start the real model's server marked like its other tests."""
    return [pytest.param(n, marks=LLAMA_MARKS) if n in build.REAL_MODEL else n for n in names]


def _committed(name: str):
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def test_every_committed_notebook_has_a_source_and_every_source_is_committed():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)
    assert NAMES == ["01_quickstart", "02_context_over_time", "03_langgraph_agent", "04_chat_history",
                     "05_real_summarizer"]
    assert set(build.VALUES_COMPARED) <= set(NAMES) and set(build.REAL_MODEL) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_is_what_build_writes_and_was_run_from_it(name):
    committed = _committed(name)
    nbformat.validate(committed)
    assert build.problems(committed, name) == []


def test_drift_is_detected():
    """The check fails on an edited code cell, on outputs left from other code, and on cells run by hand."""
    name = NAMES[0]
    edited = _committed(name)
    k = next(i for i, c in enumerate(edited.cells) if c.cell_type == "code")
    edited.cells[k].source += "\nprint('edited by hand')"
    found = build.problems(edited, name)
    assert any("differs from notebooks/build.py" in p for p in found)
    assert any("not produced by its cells" in p for p in found)

    rerun = _committed(name)
    rerun.cells[k].execution_count = 7
    assert any("execution counts" in p for p in build.problems(rerun, name))


def test_model_output_tags_are_part_of_the_source():
    """Untagging a model cell by hand (so its text would be compared) or tagging another is drift."""
    name = build.VALUES_COMPARED[0]
    tagged = [i for i, c in enumerate(_committed(name).cells) if build.MODEL_OUTPUT_TAG in c.metadata.get("tags", [])]
    assert tagged
    untagged = _committed(name)
    untagged.cells[tagged[0]].metadata["tags"] = []
    assert any("differs from notebooks/build.py" in p for p in build.problems(untagged, name))


def test_repeatable_outputs_compare_the_text_of_untagged_cells_only():
    def cell(source: str, text: str, *, tagged: bool = False) -> nbformat.NotebookNode:
        c = build.model_code(source) if tagged else build.code(source)
        c.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text),
                     nbformat.v4.new_output("execute_result", data={"text/plain": text.upper(), "image/png": "x"})]
        return c

    def notebook(stable: str, model: str) -> nbformat.NotebookNode:
        return nbformat.v4.new_notebook(cells=[cell("print(1)", stable), build.md("prose"),
                                               cell("print(model())", model, tagged=True)])

    base = build.repeatable_outputs(notebook("10 messages\n", "a summary"))
    assert base == [["stdout: 10 messages\n", "10 MESSAGES\n"], None]
    assert build.repeatable_outputs(notebook("10 messages\n", "another summary")) == base  # the model's text varies
    assert build.repeatable_outputs(notebook("11 messages\n", "a summary")) != base  # a repeatable value changed


@pytest.mark.parametrize("name", NAMES)
def test_first_cell_says_what_the_reader_will_learn(name):
    first = _committed(name).cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert "**What you will learn**" in first.source


@pytest.mark.parametrize("name", NAMES)
def test_notebook_imports_only_the_public_api(name):
    imported = set()
    for cell in _committed(name).cells:
        if cell.cell_type == "code":
            imported.update(re.findall(r"^\s*(?:from|import)\s+(lc_compaction[\w.]*)", cell.source, re.MULTILINE))
    assert imported and all(PUBLIC.match(module) for module in imported), imported


@pytest.mark.parametrize("name", _runs(NAMES))
def test_notebook_runs_top_to_bottom_and_matches_its_committed_outputs(name, tmp_path: Path):
    copy = tmp_path / f"{name}.ipynb"
    shutil.copy(NOTEBOOKS / f"{name}.ipynb", copy)
    nb = nbformat.read(copy, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    build.execute(nb, tmp_path)  # raises CellExecutionError on any error

    fresh, committed = build.output_kinds(nb), build.output_kinds(_committed(name))
    assert fresh == committed
    if name in build.VALUES_COMPARED:
        assert build.repeatable_outputs(nb) == build.repeatable_outputs(_committed(name))
    assert not any(kind == "error" for kinds in fresh for kind in kinds)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for cell, kinds in zip(code_cells, fresh):
        if re.search(r"\bplot_\w+\(", cell.source):
            assert "display_data:image/png" in kinds, cell.source  # figures are committed as PNG


def test_execution_uses_this_interpreter_and_fails_on_an_error(tmp_path: Path):
    import sys

    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import sys, tempfile\nprint(sys.executable)\nprint(tempfile.gettempdir())"),
        nbformat.v4.new_code_cell("raise ValueError('boom in a notebook')"),
    ])
    with pytest.raises(CellExecutionError, match="boom in a notebook"):
        build.execute(nb, tmp_path)
    executable, tmpdir = nb.cells[0].outputs[0].text.split()
    assert Path(executable) == Path(sys.executable)
    assert Path(tmpdir).resolve() == tmp_path.resolve()
