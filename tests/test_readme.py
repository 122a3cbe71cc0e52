"""The README's Python code blocks run as written, each on its own (issue 15).

Each ```python block is run in a fresh interpreter, from a neutral
directory, so a block that uses a name only an earlier block defines fails
here (as it would for a reader who runs it alone).  docs/plugins.md's blocks
are fragments of a step-by-step text (``MyLoss`` stands for the reader's
loss) and are not run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def test_the_readme_has_the_quickstarts():
    blocks = python_blocks(README)
    assert len(blocks) >= 3
    assert any('RankSVM(loss="ap"' in b for b in blocks)
    assert any("register(MyPlugin()" in b for b in blocks)


@pytest.mark.parametrize("index", range(len(python_blocks(README))))
def test_readme_python_block_runs_alone(index):
    code = python_blocks(README)[index]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir()
    )
    assert done.returncode == 0, f"README block {index} failed:\n{code}\n{done.stderr[-3000:]}"


def test_rerunning_the_plugin_quickstart_in_one_process_gives_a_short_message():
    (quickstart,) = [b for b in python_blocks(README) if "register(MyPlugin()" in b]
    # The fit is not what is tested here: stop the block before it.
    code = quickstart.split("ranker = ")[0]
    probe = (
        f"code = {code!r}\nexec(code, {{}})\ntry:\n    exec(code, {{}})\nexcept ValueError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir()
    )
    assert done.returncode == 0, done.stderr
    message = done.stdout.strip()
    assert len(message.splitlines()) == 1 and len(message) < 300, message
    assert "'my-plugin', already registered" in message and "unregister(name='my-plugin')" in message


def test_the_torch_blocks_run_without_a_warning():
    """Issue 38, point 18: it ended with ``print(float(loss))``, which warns about requires_grad; issue 61,
    point 26: a DataLoader's collate function (padding, mask, padding's labels), which runs as written."""
    pytest.importorskip("torch")
    blocks = [b for b in python_blocks(README) if "RankHingeLoss" in b]
    assert len(blocks) == 3 and "collate_fn=collate" in blocks[1] and "never read" in blocks[1]
    for block in blocks[:2]:  # the third, torch.compile's, runs in test_the_compiled_step_runs_as_written
        _run_without_a_warning(block)


def test_the_compiled_step_runs_as_written():
    """Issue 61, point 23: the README said that torch.compile takes a whole training step with the hinge
    (fullgraph=True), and a step with optimizer.zero_grad() inside broke the graph (for BCE too); it now compiles
    the forward and the loss, as users write it, and the step around them runs as written."""
    pytest.importorskip("torch")
    (block,) = [b for b in python_blocks(README) if "torch.compile(fullgraph=True)" in b]
    assert "optimizer.zero_grad()" in block.split("def forward_loss")[1].split("for step")[1]  # outside the graph
    inductor_import = "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"  # as in test_torch_compile
    float(_run_without_a_warning(block, inductor_import).strip().splitlines()[-1])


def _run_without_a_warning(code: str, *torch_own: str) -> str:
    """Run ``code`` in a fresh interpreter with warnings as errors (but ``torch_own``, filters of warnings that
    torch raises inside itself); its standard output."""
    ignored = [option for warning in torch_own for option in ("-W", warning)]
    done = subprocess.run(
        [sys.executable, "-W", "error", *ignored, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tempfile.gettempdir(),
    )
    assert done.returncode == 0 and not done.stderr, done.stderr[-3000:]
    return done.stdout


def test_the_readme_tells_a_newcomer_what_the_install_does():
    """Issue 38, points 13 and 17: a silent 3-minute build, and torch's CUDA build on a CPU-only machine."""
    text = README.read_text(encoding="utf-8")
    assert "pip prints nothing while it does" in text and "one job per core" in text
    assert "https://download.pytorch.org/whl/cpu" in text and "GPU users" in text


def test_the_user_guides_speed_table_lists_each_row_once():
    guide = (README.parent / "docs" / "user-guide.md").read_text(encoding="utf-8")
    start = guide.index("| scores | \\|N\\| | loss | call |")
    rows = [line for line in guide[start:].split("\n\n")[0].splitlines() if line.startswith("|")]
    assert len(rows) > 10 and len(rows) == len(set(rows))


def test_the_structures_are_exported_where_plugin_authors_look():
    from rankopt.losses import GradedPairStructure, GradedPositionStructure, GradedQueryStructure, TopKCountStructure

    assert all(
        cls.__module__ == "rankopt.losses.structure"
        for cls in (GradedPairStructure, GradedPositionStructure, GradedQueryStructure, TopKCountStructure)
    )


def test_the_lightgbm_recipe_stops_at_the_best_round_of_the_losss_metric():
    """Issue 47, point 2: LightGBM's default ndcg@1…@5 stopped the README's recipe on whichever stalled first."""
    pytest.importorskip("lightgbm")
    (block,) = [b for b in python_blocks(README) if "LGBMRanker" in b]
    probe = block + (
        "\nrecord = ranker.evals_result_['valid_0']\n"
        "assert list(record) == ['ndcg_graded'], list(record)\n"
        "best = int(max(range(len(record['ndcg_graded'])), key=record['ndcg_graded'].__getitem__)) + 1\n"
        "assert ranker.best_iteration_ == best, (ranker.best_iteration_, best)\n"
        "assert len(record['ndcg_graded']) == best + 30 or len(record['ndcg_graded']) == 300\n"
        "print('best', best)\n"
    )
    assert "best" in _run_without_a_warning(probe)


def test_the_readme_says_how_to_get_xgboosts_cpu_build_and_how_long_the_tests_take():
    """Issue 47, points 23 and 25: the xgboost extra pulls 700 MB of CUDA libraries; the test time was unsaid."""
    text = README.read_text(encoding="utf-8")
    assert "pip install xgboost-cpu" in text and "CUDA" in text
    after_command = text.split("<!-- ci:test-command:end -->")[1][:400]
    assert re.search(r"about [\d,]+ tests: \d+ minutes on 2 idle cores, up to \d+ on 2 busy ones", after_command)


def test_read_svmlight_is_one_obvious_import():
    """Issue 47, point 24: the README's own words, ``rankopt.read_svmlight(path)``."""
    import rankopt
    import rankopt.data

    assert "rankopt.read_svmlight(path)" in README.read_text(encoding="utf-8")
    assert rankopt.read_svmlight is rankopt.data.read_svmlight
